"""Click parameter types shared by the operator commands: durations and points in time.

A bad value is a usage error (exit 2) naming the option and an accepted form.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

import click

from outbox.admin import _timeparse


class Duration(click.ParamType[dt.timedelta]):
    """``90s``, ``30m``, ``2h``, ``7d``, ``1h30m`` or ISO 8601 ``PT2H``; at least ``minimum``."""

    name = "duration"

    def __init__(self, minimum: dt.timedelta = dt.timedelta(0)) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        try:
            duration = _timeparse.parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if duration < self.minimum:
            self.fail(f"{value!r} is shorter than {_timeparse.format_duration(self.minimum)}",
                      param, ctx)
        return duration


class When(click.ParamType[dt.datetime]):
    """A time ago (``2h``, ``7d``) or an ISO 8601 time (UTC unless it has an offset)."""

    name = "when"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dt.datetime:
        if isinstance(value, dt.datetime):
            return value
        try:
            return _timeparse.parse_when(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def check_range(since: dt.datetime | None, until: dt.datetime | None) -> None:
    """Usage error (exit 2) if ``--since`` is not before ``--until``."""
    if since is not None and until is not None and since >= until:
        raise click.BadParameter(
            f"--since ({since.isoformat(timespec='seconds')}) must be before --until "
            f"({until.isoformat(timespec='seconds')})", param_hint="--since/--until")


TIME_HELP = "A time ago (2h, 7d, 30m, 90s) or ISO 8601 (2024-05-01T12:00Z; UTC if no offset)."


F = TypeVar("F", bound=Callable[..., Any])


def delivery_options(f: F) -> F:
    """``--max-attempts``, ``--retry-base-seconds``, ``--retry-cap-seconds``, ``--timeout``:
    the per-endpoint overrides of the worker's settings (add and update share them)."""
    positive = click.FloatRange(min=0, min_open=True)
    options = [
        click.option("--max-attempts", type=click.IntRange(1, 100), default=None,
                     help="Attempts before a delivery is dead (default: $OUTBOX_MAX_ATTEMPTS)."),
        click.option("--retry-base-seconds", type=positive, default=None,
                     help="First retry delay scale (default: $OUTBOX_RETRY_BASE_SECONDS)."),
        click.option("--retry-cap-seconds", type=positive, default=None,
                     help="Longest retry delay (default: $OUTBOX_RETRY_CAP_SECONDS)."),
        click.option("--timeout", "timeout_seconds", type=positive, default=None,
                     help="HTTP timeout for this endpoint, seconds."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def rate_options(f: F) -> F:
    """``--rate-limit N`` and ``--burst B``: requests per second to the endpoint across every
    worker, and how many may go at once above that (add and update share them)."""
    options = [
        click.option("--rate-limit", type=click.FloatRange(min=0, min_open=True,
                                                           max=1_000_000), default=None,
                     metavar="N", help="At most N requests per second to this endpoint, "
                     "across every worker process and host (default: no fixed limit)."),
        click.option("--burst", "rate_burst", type=click.IntRange(1, 1_000_000),
                     default=None, metavar="B",
                     help="Requests allowed at once above the rate (default: N)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def tenant_option(help_text: str) -> Callable[[F], F]:
    """``--tenant ID``: scope a command to one tenant (validated by the library)."""
    return click.option("--tenant", default=None, metavar="ID", help=help_text)
