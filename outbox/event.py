"""The event an application emits, and its validation before any SQL runs."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import uuid_utils.compat as uuid_compat

from outbox.errors import InvalidEvent

TYPE_MAX_LENGTH = 128
KEY_MAX_LENGTH = 255
TENANT_MAX_LENGTH = 128
# Dotted names such as "invoice.paid" or "user:created"; no spaces or control characters.
_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/\-]*$")
# One encoder for every payload: json.dumps with non-default options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Event:
    """An event to deliver to every enabled endpoint of its tenant subscribed to ``type``.

    ``payload`` is any JSON-serialisable value; it is serialised once, at emit time, and
    those exact bytes are what every delivery signs and POSTs. ``key`` is an optional
    ordering key. ``idempotency_key``, when given, makes re-emitting the same key a no-op
    (per tenant: two tenants may use the same key).
    ``tenant`` (1-128 characters, no control characters) scopes delivery: the event
    reaches only the endpoints registered for that tenant, plus those that opted in to
    every tenant; a tenant-less event (None) reaches the tenant-less endpoints only.
    """

    type: str
    payload: Any
    key: str | None = None
    idempotency_key: str | None = None
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """A validated event: its new id and serialised payload, ready for one INSERT.

    ``idempotency_key`` is the stored key, scoped by tenant: the caller's key for a
    tenant-less event, else ``tenant + U+001F + key`` (neither part may hold a control
    character, so the pair is unambiguous). The unique index on ``events.idempotency_key``
    then dedupes per tenant with no schema change (migration 0004 adds no index on events).
    """

    id: uuid.UUID
    type: str
    payload: str
    key: str | None
    idempotency_key: str | None
    tenant: str | None


def new_id() -> uuid.UUID:
    """A time-ordered UUIDv7: index inserts stay at the hot end; no '.' in its text."""
    return uuid_compat.uuid7()


def prepare(event: Event, max_payload_bytes: int) -> PreparedEvent:
    """Validate and serialise ``event``; raise :class:`InvalidEvent` with a clear reason."""
    if not isinstance(event, Event):
        raise InvalidEvent(f"expected outbox.Event, got {type(event).__name__}")
    check_type(event.type)
    _check_key("key", event.key)
    _check_key("idempotency_key", event.idempotency_key)
    check_tenant(event.tenant)
    try:
        body = _ENCODER.encode(event.payload)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidEvent(f"payload of {event.type!r} is not JSON-serialisable: {exc}") from exc
    size = len(body.encode("utf-8"))
    if size > max_payload_bytes:
        raise InvalidEvent(
            f"payload of {event.type!r} is {size} bytes, over the {max_payload_bytes}-byte limit"
            " (OUTBOX_MAX_PAYLOAD_BYTES)"
        )
    return PreparedEvent(new_id(), event.type, body, event.key,
                         stored_idempotency_key(event.tenant, event.idempotency_key),
                         event.tenant)


def stored_idempotency_key(tenant: str | None, key: str | None) -> str | None:
    """The key as stored: per tenant (see :class:`PreparedEvent`)."""
    if key is None or tenant is None:
        return key
    return f"{tenant}\x1f{key}"


def check_type(value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidEvent("event type must be a non-empty string, e.g. 'invoice.paid'")
    if len(value) > TYPE_MAX_LENGTH:
        raise InvalidEvent(f"event type is {len(value)} characters, over {TYPE_MAX_LENGTH}")
    if not _TYPE_RE.match(value):
        raise InvalidEvent(
            f"event type {value!r} is malformed: use letters, digits and . _ : / - "
            "(e.g. 'invoice.paid')"
        )


def check_tenant(value: object) -> None:
    """A tenant id: None (tenant-less), or 1-128 characters without control characters."""
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidEvent("tenant must be a non-empty string or None")
    if len(value) > TENANT_MAX_LENGTH:
        raise InvalidEvent(f"tenant is {len(value)} characters, over {TENANT_MAX_LENGTH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidEvent("tenant contains control characters")


def _check_key(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{name} must be a non-empty string or None")
    if len(value) > KEY_MAX_LENGTH:
        raise InvalidEvent(f"{name} is {len(value)} characters, over {KEY_MAX_LENGTH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidEvent(f"{name} contains control characters")
