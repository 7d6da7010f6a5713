"""Validation of endpoint input shared by :mod:`outbox.admin.endpoints`' operations: the URL,
text, headers, delivery options, rate limits, and the registration-time SSRF check. Each
check raises :class:`~outbox.errors.InvalidEndpoint` and runs before any SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from psycopg.types.json import Jsonb

from outbox._destinations import BROKER_SCHEMES, is_broker, parse_broker_url, split_credentials
from outbox._security.ssrf import (
    ALLOW_SETTING,
    BlockedAddress,
    IPNetwork,
    ResolutionFailed,
    check_url_sync,
)
from outbox.admin._routing import validate_filters
from outbox.admin.endpoint_options import RATE_MAX, EndpointOptions, check_headers
from outbox.errors import EndpointNotFound, InvalidEndpoint

URL_MAX_LENGTH = 2048
#: An endpoint's description, in characters (the API, CLI and portal form take as many).
DESCRIPTION_MAX_LENGTH = 1000

def validate_url(url: str, *, allow_brokers: bool = True) -> str:
    """``url`` if it is an absolute http(s) URL with a host and no credentials, or (unless
    not ``allow_brokers``) a broker URL :func:`~outbox._destinations.parse_broker_url`
    accepts, credentials allowed."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidEndpoint("endpoint URL is empty")
    if len(url) > URL_MAX_LENGTH:
        raise InvalidEndpoint(f"endpoint URL is {len(url)} characters, over {URL_MAX_LENGTH}")
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise InvalidEndpoint("endpoint URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidEndpoint(f"endpoint URL is malformed: {exc}") from exc
    if parts.scheme.lower() in BROKER_SCHEMES:
        if not allow_brokers:
            raise InvalidEndpoint("endpoint URL must be http:// or https:// here (a"
                                  f" {parts.scheme}:// destination is an operator's to register)")
        parse_broker_url(url)
        return url
    if parts.scheme not in ("http", "https"):
        raise InvalidEndpoint(
            "endpoint URL must be absolute http:// or https:// (or amqp, amqps, nats, redis,"
            f" rediss), got {parts.scheme or 'none'!r}"
        )
    if not parts.hostname:
        raise InvalidEndpoint("endpoint URL has no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidEndpoint("endpoint URL must not contain credentials (user:pass@)")
    if parts.fragment:
        raise InvalidEndpoint("endpoint URL must not contain a #fragment")
    if port == 0:
        raise InvalidEndpoint("endpoint URL port must be 1-65535")
    return url


def validate_text(name: str, value: str | None, *, max_length: int = 1000) -> str | None:
    """``value`` (a description, a disable reason) if it is text PostgreSQL can store and
    a terminal can show: no NUL or other control character (tab and newlines allowed), no
    lone surrogate, at most ``max_length`` characters; else :class:`InvalidEndpoint`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEndpoint(f"{name} must be a string")
    if len(value) > max_length:
        raise InvalidEndpoint(f"{name} is {len(value)} characters, over {max_length}")
    if any((ord(c) < 32 and c not in "\t\n\r") or 127 <= ord(c) < 160 for c in value):
        raise InvalidEndpoint(f"{name} contains a control character (NUL, ESC...)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEndpoint(f"{name} holds a lone surrogate (not valid UTF-8)") from None
    return value


def validate_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Custom headers sent with every delivery; reserved and malformed ones are refused
    (the rules: :func:`outbox.admin.endpoint_options.check_headers`)."""
    try:
        return check_headers(headers)
    except ValueError as exc:
        raise InvalidEndpoint(str(exc)) from None


def validate_options(options: EndpointOptions | None = None, **values: Any) -> dict[str, Any]:
    """Every :class:`~outbox.admin.endpoint_options.EndpointOptions` field as a SQL parameter:
    ``options``' values, overridden by the ``values`` that are not ``None``; refused with
    :class:`InvalidEndpoint` naming each bad one (a NaN, an infinity, out of range)."""
    merged = options.given() if options is not None else {}
    merged.update({k: v for k, v in values.items() if v is not None})
    try:
        return EndpointOptions.checked(merged).model_dump()
    except ValueError as exc:
        raise InvalidEndpoint(str(exc)) from None


def check_destination(url: str, allow_networks: Sequence[IPNetwork]) -> tuple[str, ...]:
    """Registration-time SSRF check of ``url`` (already validated by :func:`validate_url`).

    Raises :class:`InvalidEndpoint` if the host is or resolves to an address that is not
    public and not in ``allow_networks``; returns a one-line warning if the host cannot be
    resolved now (the worker checks again before every connection), else ``()``.
    """
    try:
        check_url_sync(url, allow_networks)
    except BlockedAddress as exc:
        raise InvalidEndpoint(
            f"endpoint URL {url} resolves to {exc.address} ({exc.reason}); "
            f"set {ALLOW_SETTING} to allow it"
        ) from None
    except ResolutionFailed as exc:
        return (f"{exc}; registered anyway, the worker checks the address before each "
                "delivery",)
    return ()


def split_url(url: str) -> tuple[str, str | None]:
    """A broker URL without its credentials, and them; an HTTP URL as it is."""
    return split_credentials(url) if is_broker(url) else (url, None)


def positive(name: str, value: float | None, upper: float = RATE_MAX) -> Any:
    """``value`` if None or a finite number above 0 and at most ``upper`` (NaN, infinities,
    booleans and text refused: :class:`InvalidEndpoint`)."""
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 < value <= upper:  # NaN fails every comparison
        raise InvalidEndpoint(f"{name} must be positive and at most {upper:g} (a finite"
                              f" number), got {value!r}")
    return value


def rate_params(rate_limit: float | None, rate_burst: int | None, *,
                has_rate: bool = False) -> dict[str, Any]:
    """Validated rate limit settings (a burst needs a rate, given or ``has_rate``: alone it
    limits nothing)."""
    if rate_burst is not None and rate_limit is None and not has_rate:
        raise InvalidEndpoint("rate_burst needs rate_limit (requests per second)")
    if rate_burst is not None and (isinstance(rate_burst, bool)
                                   or not isinstance(rate_burst, int)):
        raise InvalidEndpoint(f"rate_burst must be a whole number, got {rate_burst!r}")
    return {"rate_limit": positive("rate_limit", rate_limit),
            "rate_burst": positive("rate_burst", rate_burst)}


def flag(name: str, value: bool | None) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise InvalidEndpoint(f"{name} must be True or False, got {value!r}")
    return value


def shared_params(event_types: Sequence[str] | None, headers: Mapping[str, str] | None,
                  ordered: bool | None, options: EndpointOptions | None,
                  **values: Any) -> dict[str, Any]:
    """The SQL parameters ``add`` and ``update`` both take, validated in this order: the
    event type filters, the headers, the delivery options (``options`` overridden by the
    ``values`` given, as :func:`validate_options`), ``ordered``."""
    return {
        "event_types": validate_filters(event_types),
        "headers": Jsonb(validate_headers(headers)),
        **validate_options(options, **values),
        "ordered": flag("ordered", ordered),
    }


def parse_id(endpoint_id: str | uuid.UUID) -> uuid.UUID:
    """``endpoint_id`` as a UUID, or :class:`EndpointNotFound` naming what was given."""
    if isinstance(endpoint_id, uuid.UUID):
        return endpoint_id
    try:
        return uuid.UUID(endpoint_id)
    except ValueError:
        raise EndpointNotFound(f"no endpoint {endpoint_id!r} (ids look like a UUID)") from None
