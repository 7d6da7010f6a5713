"""The event catalog as emit sees it: the registered types and their JSON Schemas, cached
per process and database, and the payload check :mod:`outbox._emit.plan` runs before any
SQL.

Freshness: a process holds one :class:`Snapshot` per (database, schema). Emit uses it
without any query while it is younger than ``OUTBOX_CATALOG_REFRESH_SECONDS``; past that,
the runner reads ``queries.CATALOG_READ`` on the caller's connection, in the caller's
transaction, before the emit statement: one row (the catalog version), plus the types only
when the version moved. So the common emit adds no round trip, and a change made anywhere
(another process, psql) is seen within that many seconds; a change made through
:mod:`outbox.admin.types` in this process is seen at once (:func:`forget`).

The validator (``jsonschema-rs``, the ``catalog`` extra) is imported and a schema compiled
only when an emitted type has a schema: an app whose catalog is empty needs neither.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from outbox.errors import ConfigurationError, InvalidEvent
from outbox.settings import Settings

log = logging.getLogger("outbox.catalog")

DRAFT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(slots=True)
class Entry:
    """One registered type: its schema (None: registered, never checked)."""

    name: str
    schema: dict[str, Any] | None
    deprecated: bool
    _check: Callable[[Any], str | None] | None = None
    _warned: bool = False

    def problem(self, body: str, source: Any = None) -> str | None:
        """None if the payload matches the schema, else "at PATH: why" for the first error.

        ``body`` is the payload's JSON; ``source``, when not None, the caller's object it
        was encoded from with JSON's own types alone: checked as is, which saves decoding
        the body (a dict key JSON would have turned into a string falls back to it)."""
        if self.schema is None:
            return None
        if self._check is None:
            self._check = compile_schema(self.schema)
        if source is not None:
            try:
                return self._check(source)
            except (ValueError, TypeError, OverflowError):
                pass
        return self._check(json.loads(body))


@dataclass(slots=True)
class Snapshot:
    """The catalog of one database at ``version``, read at ``read_at`` (monotonic)."""

    version: int | None
    types: dict[str, Entry] = field(default_factory=dict)
    read_at: float = 0.0


_SNAPSHOTS: dict[tuple[str, str], Snapshot] = {}
_LOCK = threading.Lock()


def json_path(parts: list[str | int]) -> str:
    """``$.items[0].amount`` for the instance path ``["items", 0, "amount"]``."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (
            f".{part}" if part.isidentifier() else f"[{json.dumps(part)}]")
    return out


def compile_schema(schema: dict[str, Any]) -> Callable[[Any], str | None]:
    """A check of payloads against ``schema`` (draft 2020-12): None, or the first error."""
    try:
        import jsonschema_rs
    except ImportError:
        raise ConfigurationError(
            "an event type has a JSON Schema: install the catalog extra "
            "(pip install 'outbox[catalog]') to check payloads, or set OUTBOX_VALIDATE=off"
        ) from None
    validator = jsonschema_rs.Draft202012Validator(schema)

    def check(payload: Any) -> str | None:
        if validator.is_valid(payload):
            return None
        first = next(iter(validator.iter_errors(payload)))
        return f"at {json_path(list(first.instance_path))}: {first.message}"

    return check


def _attr(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, None also when a property raises (an ORM object that
    is not started or has no bind: emit's own checks say so)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def database_key(handle: Any, depth: int = 0) -> str:
    """Which database ``handle`` (a connection, session, cursor or runner) talks to, read
    from the driver's own attributes without a query; "" if it cannot tell."""
    if handle is None or depth > 4:
        return ""
    info = _attr(handle, "info")  # psycopg 3, psycopg2
    dbname = _attr(info, "dbname")
    if isinstance(dbname, str):
        return f"{_attr(info, 'host')}:{_attr(info, 'port')}/{dbname}"
    engine = _attr(handle, "engine")  # SQLAlchemy Connection
    get_bind = _attr(handle, "get_bind")
    if engine is None and callable(get_bind):
        try:
            engine = get_bind()  # SQLAlchemy Session
        except Exception:  # no default bind: emit itself says so
            engine = None
    url = _attr(engine, "url")
    if url is not None:
        return f"{url.host}:{url.port}/{url.database}"
    params = _attr(handle, "_params")  # asyncpg
    if params is not None and hasattr(params, "database"):
        return f"{_attr(handle, '_addr')}/{params.database}"
    for name in ("_raw", "_con", "_conn", "_handle", "sync_session", "sync_connection",
                 "connection"):
        inner = _attr(handle, name)
        if name == "_raw" and callable(inner):
            try:
                inner = inner()
            except Exception:
                inner = None
        if inner is not None and inner is not handle:
            found = database_key(inner, depth + 1)
            if found:
                return found
    return ""


def wanted(settings: Settings) -> bool:
    """Whether emit consults the catalog at all."""
    return settings.validate_payloads != "off" or settings.require_registered_types


def fresh(settings: Settings, database: str, schema: str) -> Snapshot | None:
    """The snapshot emit may use without a query, or None (stale or never read)."""
    snap = _SNAPSHOTS.get((database, schema))
    if snap is None or time.monotonic() - snap.read_at > settings.catalog_refresh_seconds:
        return None
    return snap


def known_version(database: str, schema: str) -> int | None:
    """The version this process holds (CATALOG_READ's parameter), or None."""
    snap = _SNAPSHOTS.get((database, schema))
    return None if snap is None else snap.version


def store(database: str, schema: str, row: tuple[Any, ...] | None) -> Snapshot:
    """Record CATALOG_READ's row: a new snapshot if the version moved, else the held one
    with its read time renewed."""
    version = None if row is None else int(row[0])
    types_json = None if row is None else row[1]
    with _LOCK:
        held = _SNAPSHOTS.get((database, schema))
        if held is not None and held.version == version and types_json is None:
            held.read_at = time.monotonic()
            return held
        types = {} if types_json is None else {
            t["name"]: Entry(t["name"], t["schema"], bool(t["deprecated"]))
            for t in json.loads(types_json)}
        snap = Snapshot(version, types, time.monotonic())
        _SNAPSHOTS[(database, schema)] = snap
        return snap


def forget() -> None:
    """Drop every held snapshot: the next emit reads the catalog again."""
    with _LOCK:
        _SNAPSHOTS.clear()


def check(snapshot: Snapshot | None, settings: Settings, event_type: str, body: str,
          source: Any = None) -> None:
    """Raise :class:`InvalidEvent` if the catalog refuses this event (see Settings)."""
    if snapshot is None:
        return
    entry = snapshot.types.get(event_type)
    if entry is None:
        if settings.require_registered_types:
            raise InvalidEvent(
                f"event type {event_type!r} is not registered in the catalog "
                "(OUTBOX_REQUIRE_REGISTERED_TYPES=true): register it with `outbox types add`")
        return
    if entry.deprecated and not entry._warned:
        entry._warned = True
        log.warning("emitting deprecated event type %r", event_type)
    if entry.schema is None or settings.validate_payloads == "off":
        return
    problem = entry.problem(body, source)
    if problem is None:
        return
    message = f"payload of {event_type!r} does not match its schema {problem}"
    if settings.validate_payloads == "strict":
        raise InvalidEvent(message)
    log.warning("%s (OUTBOX_VALIDATE=warn: emitted anyway)", message)
