"""Endpoints: where deliveries go, how they are signed, which events they receive.

Every function validates its input before any SQL and raises
:class:`~outbox.errors.InvalidEndpoint` (nothing written) or
:class:`~outbox.errors.EndpointNotFound`. Functions run on the caller's connection: in
autocommit mode each call commits on its own; inside a transaction it commits with it.
New and re-enabled endpoints receive events emitted after their commit, never earlier ones.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outbox import queries
from outbox.db import render, translated
from outbox.errors import EndpointNotFound, InvalidEndpoint, InvalidEvent
from outbox.event import check_type, new_id
from outbox.signing import decode_secret, generate_secret

URL_MAX_LENGTH = 2048
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "content-encoding", "transfer-encoding",
     "connection", "idempotency-key", "user-agent", "traceparent"}
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An endpoint as stored, without its secrets (those are never read back)."""

    id: uuid.UUID
    url: str
    description: str
    event_types: list[str] | None
    headers: dict[str, str]
    enabled: bool
    disabled_reason: str | None
    max_attempts: int | None
    retry_base_seconds: float | None
    retry_cap_seconds: float | None
    timeout_seconds: float | None
    max_in_flight: int | None
    previous_secret_expires_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Created:
    """``add``'s result; ``secret`` is set only when outbox generated it (shown once)."""

    endpoint: Endpoint
    secret: str | None


def validate_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL with a host and no credentials."""
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
    if parts.scheme not in ("http", "https"):
        raise InvalidEndpoint(
            f"endpoint URL must be absolute http:// or https://, got {parts.scheme or 'none'!r}"
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


def validate_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Custom headers sent with every delivery; reserved and malformed ones are refused."""
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not _HEADER_NAME_RE.match(name):
            raise InvalidEndpoint(f"header name {name!r} is not a valid HTTP token")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("webhook-"):
            raise InvalidEndpoint(f"header {name!r} is set by outbox and cannot be overridden")
        if any(c in value for c in "\r\n\0") or len(value) > 4096:
            raise InvalidEndpoint(f"header {name!r} has a control character or is too long")
        out[name] = value
    return out


def _validate_types(event_types: Sequence[str] | None) -> list[str] | None:
    if not event_types:
        return None
    try:
        for t in event_types:
            check_type(t)
    except InvalidEvent as exc:
        raise InvalidEndpoint(f"event-type filter: {exc}") from exc
    return sorted(set(event_types))


def _row_to_endpoint(row: dict[str, Any]) -> Endpoint:
    return Endpoint(**row)


def add(
    conn: psycopg.Connection[Any],
    url: str,
    *,
    schema: str,
    event_types: Sequence[str] | None = None,
    secret: str | None = None,
    headers: Mapping[str, str] | None = None,
    description: str = "",
    max_attempts: int | None = None,
    retry_base_seconds: float | None = None,
    retry_cap_seconds: float | None = None,
    timeout_seconds: float | None = None,
    max_in_flight: int | None = None,
) -> Created:
    """Register an endpoint. Without ``secret`` one is generated and returned once."""
    validate_url(url)
    params = {
        "id": new_id(),
        "url": url,
        "description": description,
        "event_types": _validate_types(event_types),
        "headers": Jsonb(validate_headers(headers)),
        "max_attempts": _positive("max_attempts", max_attempts, upper=100),
        "retry_base_seconds": _positive("retry_base_seconds", retry_base_seconds),
        "retry_cap_seconds": _positive("retry_cap_seconds", retry_cap_seconds),
        "timeout_seconds": _positive("timeout_seconds", timeout_seconds),
        "max_in_flight": _positive("max_in_flight", max_in_flight),
    }
    generated = secret is None
    the_secret = generate_secret() if secret is None else secret
    decode_secret(the_secret)
    params["secret"] = the_secret
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(render(queries.ENDPOINT_INSERT, schema), params)
        row = cur.fetchone()
    assert row is not None
    return Created(_row_to_endpoint(row), the_secret if generated else None)


def _positive(name: str, value: float | None, upper: float | None = None) -> Any:
    if value is None:
        return None
    if value <= 0 or (upper is not None and value > upper):
        bound = f" and at most {upper:g}" if upper is not None else ""
        raise InvalidEndpoint(f"{name} must be positive{bound}, got {value}")
    return value


def list_all(conn: psycopg.Connection[Any], *, schema: str) -> list[Endpoint]:
    """Every endpoint, oldest first."""
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(render(queries.ENDPOINT_LIST, schema))
        return [_row_to_endpoint(r) for r in cur.fetchall()]


def parse_id(endpoint_id: str | uuid.UUID) -> uuid.UUID:
    """``endpoint_id`` as a UUID, or :class:`EndpointNotFound` naming what was given."""
    if isinstance(endpoint_id, uuid.UUID):
        return endpoint_id
    try:
        return uuid.UUID(endpoint_id)
    except ValueError:
        raise EndpointNotFound(f"no endpoint {endpoint_id!r} (ids look like a UUID)") from None


def get(conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID, *, schema: str) -> Endpoint:
    """One endpoint, or :class:`EndpointNotFound`."""
    eid = parse_id(endpoint_id)
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(render(queries.ENDPOINT_GET, schema), (eid,))
        row = cur.fetchone()
    if row is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return _row_to_endpoint(row)


def set_enabled(
    conn: psycopg.Connection[Any],
    endpoint_id: str | uuid.UUID,
    enabled: bool,
    *,
    schema: str,
    reason: str | None = None,
) -> Endpoint:
    """Enable or disable an endpoint. Disabled endpoints get no new deliveries and
    workers do not send their pending ones until re-enabled."""
    eid = parse_id(endpoint_id)
    params = {"id": eid, "enabled": enabled, "reason": None if enabled else (reason or "manual")}
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(render(queries.ENDPOINT_SET_ENABLED, schema), params)
        row = cur.fetchone()
    if row is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return _row_to_endpoint(row)
