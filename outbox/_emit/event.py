"""The event an application emits, and its validation before any SQL runs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import uuid_utils
import uuid_utils.compat as uuid_compat
from pydantic import BaseModel

from outbox.errors import InvalidEvent

TYPE_MAX_LENGTH = 128
KEY_MAX_LENGTH = 255
TENANT_MAX_LENGTH = 128
# Dotted names such as "invoice.paid" or "user:created"; no spaces or control characters.
_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/\-]*\Z")  # \Z: no trailing newline
#: ``json_default``: encodes an application type outbox does not know (see :class:`Event`).
JsonDefault = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Event:
    """An event to deliver to every enabled endpoint of its tenant subscribed to ``type``.

    ``payload`` is serialised once, at emit time, to compact UTF-8 JSON (no spaces, non-ASCII
    kept as is); those exact bytes are what every delivery signs and POSTs. Accepted, and
    their JSON form:

    - ``dict`` (keys ``str``; ``int``/``float``/``bool``/``None`` keys become strings, as in
      :mod:`json`), ``list`` and ``tuple`` (an array), ``str``, ``int``, finite ``float``,
      ``bool``, ``None``: as :func:`json.dumps` writes them.
    - ``datetime``: ``isoformat()``, e.g. ``"2024-05-01T12:00:00.250000+02:00"``; the
      timezone offset is kept (UTC is ``+00:00``), a naive datetime stays naive (no offset:
      pass aware datetimes if receivers must know the instant). Microseconds appear only
      when non-zero. ``date``: ``"2024-05-01"``; ``time``: ``"12:00:00"`` (offset if aware).
    - ``Decimal``: a JSON *string* of ``str(d)``, the exact digits and exponent it holds
      (``"9.99"``, ``"9.990"``, ``"1E+2"``), never through float. NaN/Infinity refused.
    - ``UUID`` (also ``uuid_utils.UUID``): its canonical string, lowercase with hyphens.
    - ``Enum``: its ``.value``, encoded by these same rules.
    - a dataclass instance: an object of every field by name in declaration order (as
      :func:`dataclasses.asdict`), values encoded by these rules (nested dataclasses too).
    - a pydantic model: ``model.model_dump(mode="json")`` -- the model's own serialisers and
      pydantic's JSON forms, which differ in places (a UTC datetime is ``"...Z"``).
    - anything else: the ``json_default`` hook (``prepare``'s argument; emit passes the
      ``OUTBOX_JSON_DEFAULT`` setting's), called like :func:`json.dumps`' ``default`` with
      each object of a type listed nowhere above (never with the types above, whose forms
      are fixed), returning a value encoded by these rules or raising ``TypeError``.

    Refused with :class:`InvalidEvent` before any SQL: NaN/Infinity (float or Decimal),
    ``set``/``frozenset`` (no order: pass ``sorted(...)``), ``bytes`` (encode them, e.g.
    base64), a string with a lone surrogate (not encodable as UTF-8), circular or too
    deeply nested values, any other type the hook does not encode, a hook that raises
    anything else, and a payload over ``OUTBOX_MAX_PAYLOAD_BYTES``. ``key`` is an optional
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
    character, so the pair is unambiguous). The primary key of ``event_keys`` (migration
    0025; before it, a unique index on ``events.idempotency_key``) then dedupes per tenant.
    """

    id: uuid.UUID
    type: str
    payload: str
    key: str | None
    idempotency_key: str | None
    tenant: str | None
    # The caller's payload object when it encoded with JSON's own types alone (no default
    # hook ran), so the catalog may check it without decoding ``payload``; else None.
    source: Any = None


#: Types the sender emits itself (operational events); emit refuses them.
RESERVED_PREFIX = "outbox."


def new_id() -> uuid.UUID:
    """A time-ordered UUIDv7: index inserts stay at the hot end; no '.' in its text."""
    return uuid_compat.uuid7()


def prepare(event: Event, max_payload_bytes: int, *,
            json_default: JsonDefault | None = None) -> PreparedEvent:
    """Validate and serialise ``event``; raise :class:`InvalidEvent` with a clear reason.

    ``json_default`` encodes the application's own payload types (see :class:`Event`).
    """
    if not isinstance(event, Event):
        raise InvalidEvent(f"expected outbox.Event, got {type(event).__name__}")
    check_type(event.type)
    if event.type.startswith(RESERVED_PREFIX):
        raise InvalidEvent(f"event type {event.type!r} is reserved: types starting with "
                           f"{RESERVED_PREFIX!r} are the sender's operational events")
    _check_key("key", event.key)
    _check_key("idempotency_key", event.idempotency_key)
    check_tenant(event.tenant)
    encoder = _ENCODER if json_default is None else _encoder_for(json_default)
    defaults_before = _DEFAULTS[0]
    try:  # the plain-JSON path: one C-encoder call, as before the extra types
        body = encoder.encode(event.payload)
        size = len(body.encode("utf-8"))
    except _HookFailed as exc:
        raise _refused(event.type, exc) from exc.__cause__
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError: a ValueError
        raise _refused(event.type, exc) from exc
    if size > max_payload_bytes:
        raise InvalidEvent(
            f"payload of {event.type!r} is {size} bytes, over the {max_payload_bytes}-byte limit"
            " (OUTBOX_MAX_PAYLOAD_BYTES)"
        )
    plain = _DEFAULTS[0] == defaults_before  # no default ran, in this thread or another
    return PreparedEvent(new_id(), event.type, body, event.key,
                         stored_idempotency_key(event.tenant, event.idempotency_key),
                         event.tenant, event.payload if plain else None)


class _HookFailed(Exception):
    """Encoding an object raised something other than the TypeError/ValueError of a
    documented refusal: the application's ``json_default``, or one of the application's
    objects outbox encodes itself (a dataclass field never set, a model's serialiser)."""


def _builtin(o: Any) -> Any:
    """The JSON form of a type :class:`Event` documents, else ``_UNKNOWN``."""
    if isinstance(o, dt.date | dt.time):  # datetime is a date
        return o.isoformat()
    if isinstance(o, Decimal):
        if not o.is_finite():
            raise ValueError(f"Decimal {o} is not a finite number")
        return str(o)
    if isinstance(o, uuid.UUID | uuid_utils.UUID):
        return str(o)
    if isinstance(o, enum.Enum):
        return o.value
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
    return _UNKNOWN


_UNKNOWN = object()
# How many times an encoder's default ran, in any thread (prepare compares it before and
# after encoding: unchanged means the payload held JSON's own types only).
_DEFAULTS = [0]
_HINTS: dict[type[Any], str] = {set: "a set has no order: pass sorted(...) or a list",
          frozenset: "a set has no order: pass sorted(...) or a list",
          bytes: "encode bytes first, e.g. base64", bytearray: "encode bytes first, e.g. base64"}


def _refuse(o: Any, hooked: bool) -> TypeError:
    hint = _HINTS.get(type(o)) or ("json_default did not encode it" if hooked else
                                   "pass json_default= or set OUTBOX_JSON_DEFAULT")
    return TypeError(f"Object of type {type(o).__name__} is not JSON serializable ({hint})")


def _checked_builtin(o: Any) -> Any:
    """:func:`_builtin`, whose every other failure is a ``_HookFailed``."""
    _DEFAULTS[0] += 1
    try:
        return _builtin(o)
    except (TypeError, ValueError):
        raise
    except Exception as exc:
        raise _HookFailed(f"encoding {type(o).__name__} raised {exc!r}") from exc


def _default(o: Any) -> Any:
    value = _checked_builtin(o)
    if value is _UNKNOWN:
        raise _refuse(o, False)
    return value


def _make_encoder(hook: JsonDefault | None) -> json.JSONEncoder:
    """A C-accelerated encoder: ``default`` runs only for objects json itself cannot encode,
    so plain JSON values pay nothing for the extra types."""
    if hook is None:
        default = _default
    else:
        def default(o: Any) -> Any:
            value = _checked_builtin(o)
            if value is not _UNKNOWN:
                return value
            try:
                return hook(o)
            except TypeError:
                raise _refuse(o, True) from None
            except Exception as exc:
                raise _HookFailed(f"json_default {_name(hook)} raised {exc!r}") from exc
    return json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                            default=default)


# One encoder per hook: json.dumps with non-default options builds a new one per call.
_ENCODER = _make_encoder(None)
_hooked_encoder = lru_cache(maxsize=16)(_make_encoder)


def _name(hook: JsonDefault) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


def _encoder_for(hook: JsonDefault) -> json.JSONEncoder:
    try:
        return _hooked_encoder(hook)
    except TypeError:  # an unhashable callable object: not cached
        return _make_encoder(hook)


def _refused(event_type: str, exc: Exception) -> InvalidEvent:
    """The InvalidEvent for an encoding failure ``exc``."""
    if isinstance(exc, UnicodeEncodeError):
        bad = exc.object[exc.start:exc.end]
        return InvalidEvent(f"payload of {event_type!r} holds a lone surrogate {bad!r}, which "
                            "UTF-8 cannot encode")
    return InvalidEvent(f"payload of {event_type!r} is not JSON-serialisable: {exc}")


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
    _check_encodable("tenant", value)


def _check_key(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{name} must be a non-empty string or None")
    if len(value) > KEY_MAX_LENGTH:
        raise InvalidEvent(f"{name} is {len(value)} characters, over {KEY_MAX_LENGTH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidEvent(f"{name} contains control characters")
    _check_encodable(name, value)


def _check_encodable(name: str, value: str) -> None:
    """A lone surrogate would fail in the driver, mid-statement: refuse it first."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidEvent(f"{name} holds a lone surrogate (not valid UTF-8)") from None
