"""Click parameter types shared by the operator commands: durations and points in time.

A bad value is a usage error (exit 2) naming the option and an accepted form.
"""

from __future__ import annotations

import datetime as dt
import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from outbox.admin import _timeparse
from outbox.admin.endpoint_oauth2 import OAuth2Options
from outbox.admin.endpoint_oauth2 import fields as oauth2_fields
from outbox.admin.endpoint_options import RATE_MAX, CredentialChanges, EndpointOptions, limits


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


class OptionValue(click.ParamType[Any]):
    """One :class:`~outbox.admin.endpoint_options.EndpointOptions` field: a number in its range
    (NaN, infinities and out-of-range values are a usage error naming the range)."""

    def __init__(self, field: str, integer: bool) -> None:
        self.field = field
        self.integer = integer
        self.name = "integer" if integer else "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        try:
            number = int(value) if self.integer else float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not {'an integer' if self.integer else 'a number'}",
                      param, ctx)
        try:
            EndpointOptions.checked({self.field: number})
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return number


def delivery_options(f: F) -> F:
    """One ``--option`` per :class:`~outbox.admin.endpoint_options.EndpointOptions` field (its
    name with dashes; ``--timeout`` for ``timeout_seconds``), help and range from the
    model: add and update take exactly the options the library and the API take. The
    command receives them as keyword arguments named after the fields."""
    for limit in reversed(limits()):
        field = EndpointOptions.model_fields[limit["name"]]
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flag = str(extra.get("cli") or "--" + limit["name"].replace("_", "-"))
        default = f"${limit['default']}" if limit["default"] else "the worker's"
        f = click.option(
            flag, limit["name"], type=OptionValue(limit["name"], limit["type"] == "integer"),
            default=None,
            help=f"{limit['help']}: {number(limit['min'])} to {number(limit['max'])} "
                 f"(default: {default}).")(f)
    return f


class FiniteRange(click.FloatRange):
    """click's ``FloatRange`` refusing NaN and infinities too (NaN passes its comparisons)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class Rate(click.ParamType[float]):
    """Requests per second: a finite number above 0 and at most
    :data:`~outbox.admin.endpoint_options.RATE_MAX` (NaN and infinities are a usage error)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not 0 < number <= RATE_MAX:  # NaN fails every comparison
            self.fail(f"must be above 0 and at most {RATE_MAX:,} (a finite number), got "
                      f"{value}", param, ctx)
        return number


RATE = Rate()


def rate_options(f: F) -> F:
    """``--rate-limit N`` and ``--burst B``: requests per second to the endpoint across every
    worker, and how many may go at once above that (add and update share them)."""
    options = [
        click.option("--rate-limit", type=RATE, default=None,
                     metavar="N", help="At most N requests per second to this endpoint, "
                     "across every worker process and host (default: no fixed limit)."),
        click.option("--burst", "rate_burst", type=click.IntRange(1, RATE_MAX),
                     default=None, metavar="B",
                     help="Requests allowed at once above the rate (default: N)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def number(value: float) -> str:
    """``2,592,000``, ``0.001``: a bound as people read it."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


def endpoint_options(values: dict[str, Any]) -> EndpointOptions:
    """The :func:`delivery_options` a command received (popped from ``values``)."""
    return EndpointOptions(**{name: values.pop(name, None)
                              for name in EndpointOptions.model_fields})


def tenant_option(help_text: str) -> Callable[[F], F]:
    """``--tenant ID``: scope a command to one tenant (validated by the library)."""
    return click.option("--tenant", default=None, metavar="ID", help=help_text)


def _read_pem(ctx: click.Context, param: click.Parameter, value: Any) -> str | None:
    """The text of the PEM file named by ``value`` (a usage error if it cannot be read)."""
    if value is None:
        return None
    try:
        with open(value, encoding="ascii") as f:
            return f.read(1 << 20)
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value!r}: {getattr(exc, 'strerror', None) or exc}",
                                 ctx=ctx, param=param) from None


def _from_stdin(ctx: click.Context, param: click.Parameter, value: Any) -> str | None:
    """``-``: the value is the first line of standard input (kept out of ``ps`` and shell
    history); anything else as given."""
    if value != "-":
        return value if value is None else str(value)
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise click.BadParameter("'-' reads the value from standard input, which was empty",
                                 ctx=ctx, param=param)
    return line


def credential_options(update: bool) -> Callable[[F], F]:
    """The :class:`~outbox.admin.endpoint_options.EndpointCredentials` flags of add and
    (``update``) update, which also gets the flags that remove them. Values are never
    echoed: not in help defaults, not in errors."""
    options = [
        click.option("--secret-header", "secret_headers", multiple=True, metavar="K=V",
                     help="Header whose value is secret (an API key): sent with every "
                          "delivery, stored sealed, shown by name only (repeatable)."),
        click.option("--basic-auth", metavar="USER:PASS", default=None, callback=_from_stdin,
                     help="HTTP Basic auth on every delivery (stored sealed; '-': read it "
                          "from standard input)."),
        click.option("--bearer-token", metavar="TOKEN", default=None, callback=_from_stdin,
                     help="Authorization: Bearer TOKEN on every delivery (stored sealed; "
                          "'-': read it from standard input)."),
        click.option("--tls-client-cert", metavar="FILE", default=None, callback=_read_pem,
                     help="Mutual TLS: the client certificate (chain), a PEM file."),
        click.option("--tls-client-key", metavar="FILE", default=None, callback=_read_pem,
                     help="Mutual TLS: the certificate's unencrypted private key, a PEM "
                          "file (stored sealed)."),
    ]
    if update:
        options += [
            click.option("--clear-secret-headers", is_flag=True,
                         help="Drop every secret header first."),
            click.option("--no-auth", "clear_auth", is_flag=True,
                         help="Remove the endpoint's auth (Basic or bearer)."),
            click.option("--no-tls-client-cert", "clear_tls_client_cert", is_flag=True,
                         help="Remove the TLS client certificate and key."),
        ]

    def decorate(f: F) -> F:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def endpoint_credentials(values: dict[str, Any], parse: Callable[[tuple[str, ...], str],
                                                                 dict[str, str]]
                         ) -> CredentialChanges:
    """The :func:`credential_options` a command received (popped from ``values``);
    ``parse`` turns ``K=V`` items into a mapping."""
    fields = {name: values.pop(name, None) for name in CredentialChanges.model_fields}
    fields["secret_headers"] = parse(fields["secret_headers"] or (), "--secret-header") or None
    # unvalidated here: the library checks every value, with messages that never quote one
    return CredentialChanges.model_construct(**{k: v for k, v in fields.items()
                                                if v is not None})


def oauth2_flags(f: F) -> F:
    """One ``--oauth2-*`` option per :class:`~outbox.admin.endpoint_oauth2.OAuth2Options`
    field (add and update take exactly what the library and the API take); the command
    receives them as keyword arguments named after the fields (:func:`oauth2_of`)."""
    for spec in reversed(oauth2_fields()):
        f = click.option(spec["flag"], spec["name"], default=None, metavar=spec["metavar"],
                         help=spec["help"] + ".")(f)
    return f


def oauth2_of(values: dict[str, Any]) -> OAuth2Options:
    """The :func:`oauth2_flags` a command received (popped from ``values``), checked
    (:class:`~outbox.errors.InvalidEndpoint` naming each bad one)."""
    return OAuth2Options.checked({name: v for name in OAuth2Options.model_fields
                                  if (v := values.pop(name, None)) is not None})
