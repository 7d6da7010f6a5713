"""Long statements converted once to PostgreSQL's ``$n`` placeholders.

psycopg converts a statement's ``%(name)s`` placeholders to ``$n`` on every execute and
caches the conversion only for texts of at most 4 kB; the worker's claim and completion
are longer (9-11 kB), so each call parsed its text again in Python (~31-34 us a call).
:class:`RawStatement` does that conversion once, and the statement is executed through a
raw cursor (:class:`psycopg.AsyncRawCursor`), which sends the text as it is. The same
name used twice is the same ``$n`` (as psycopg does), and the parameters are dumped as
for the named form (each by its Python type), so the server sees the same statement with
the same parameter types: nothing changes but where the text is parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["RawStatement"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


class RawStatement:
    """``sql`` (psycopg's named ``%(name)s`` form) as ``text`` with ``$n`` placeholders;
    :meth:`params` orders a mapping of values for it. ValueError for a statement that
    uses any other placeholder (``%s``, ``%b``, ``%(name)b``...)."""

    __slots__ = ("names", "text")

    def __init__(self, sql: str) -> None:
        names: list[str] = []

        def placeholder(m: re.Match[str]) -> str:
            name = m.group(1)
            if name is None:
                if m.group(0) == "%%":
                    return "%"
                raise ValueError("only %(name)s placeholders are supported:"
                                 f" {sql[m.start():][:20]!r}")
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        self.text = _PLACEHOLDER.sub(placeholder, sql)
        self.names = tuple(names)

    def params(self, values: Mapping[str, Any]) -> list[Any]:
        """The values in ``$n`` order (KeyError for a missing name, as psycopg would)."""
        return [values[name] for name in self.names]
