"""The ``--filter`` / ``--no-filter`` options of ``outbox endpoints add`` and ``update``
(payload filters, docs: guides/filters.md; checked by :mod:`outbox.admin.filters`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_FILTER_HELP = ("Deliver only events whose payload matches this JSON filter, e.g. "
                "'{\"amount\": {\"$gte\": 100}}' (or @FILE; docs: guides/filters.md).")


def filter_option(*, update: bool) -> Callable[[F], F]:
    """``--filter JSON|@FILE`` (as ``payload_filter``), and on update ``--no-filter``
    (as ``clear_filter``)."""
    def decorate(f: F) -> F:
        if update:
            f = click.option("--no-filter", "clear_filter", is_flag=True,
                             help="Remove the payload filter: every event of its types.")(f)
        return click.option("--filter", "payload_filter", default=None,
                            metavar="JSON", help=_FILTER_HELP)(f)
    return decorate


def read_json_arg(value: str | None, option: str) -> str | None:
    """The text of ``value``, read from the file after ``@`` if it starts with one."""
    if value is None or not value.startswith("@"):
        return value
    try:
        with open(value[1:], encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value[1:]!r}: {exc.strerror}",
                                 param_hint=option) from None


def filter_text(value: dict[str, Any] | None) -> str:
    """A stored filter as one line of compact JSON, ``-`` for none."""
    return "-" if value is None else json.dumps(value, separators=(", ", ": "),
                                                ensure_ascii=False)


