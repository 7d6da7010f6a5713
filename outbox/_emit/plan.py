"""Planning an emit (private): validate and encode the events, choose the statement, and
map the statement's results back to the caller's order. No SQL runs here; every runner
(:mod:`outbox._emit.drivers`) runs what this plans, so the checks and the statement are the
same on every handle."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from outbox._db import queries
from outbox._db.connection import render
from outbox._emit import catalog
from outbox._emit.catalog import Snapshot
from outbox._emit.event import Event, PreparedEvent, prepare
from outbox._emit.tracing import current_traceparent
from outbox.errors import OutboxError
from outbox.settings import Settings, get_settings

JsonDefault = Callable[[Any], Any] | None


@dataclass(slots=True)
class Batch:
    """Validated events, deduplicated on idempotency key, and the SQL to insert them."""

    query: str
    params: dict[str, list[Any]]
    # position in the caller's list -> position in params (first event with that key)
    slots: list[int] = field(default_factory=list)
    wake: bool = False  # OUTBOX_WAKEUP=notify: the COPY path runs queries.WAKE after it
    sources: list[Any] = field(default_factory=list)  # PreparedEvent.source, per params row


def settings_schema(schema: str | None, settings: Settings | None) -> tuple[Settings, str]:
    s = settings or get_settings()
    return s, schema or s.schema_name


def hook(settings: Settings, json_default: JsonDefault) -> JsonDefault:
    """The caller's ``json_default``, else ``OUTBOX_JSON_DEFAULT``'s (or None)."""
    return json_default if json_default is not None else settings.json_default_hook


def catalog_read(settings: Settings, database: str, schema: str) -> tuple[str, Any] | None:
    """The statement a runner runs before planning to refresh the catalog (psycopg's
    placeholders), or None: the catalog is off, or this process holds a fresh copy (the
    common case: no query at all; see :mod:`outbox._emit.catalog`)."""
    if not catalog.wanted(settings) or catalog.fresh(settings, database, schema) is not None:
        return None
    return render(queries.CATALOG_READ, schema), (catalog.known_version(database, schema),)


def catalog_snapshot(settings: Settings, database: str, schema: str,
                     row: tuple[Any, ...] | None = None, read: bool = False) -> Snapshot | None:
    """The snapshot to plan with: ``row`` is CATALOG_READ's, when ``read``."""
    if not catalog.wanted(settings):
        return None
    if read:
        return catalog.store(database, schema, row)
    return catalog.fresh(settings, database, schema)


def check_types(types: Snapshot | None, settings: Settings, ev: PreparedEvent | Batch) -> None:
    """Check the prepared event, or every event of the batch, against the catalog ``types``
    (None: unchecked); :class:`~outbox.errors.InvalidEvent` before any write."""
    if types is None:
        return
    if isinstance(ev, PreparedEvent):
        catalog.check(types, settings, ev.type, ev.payload, ev.source)
        return
    for event_type, body, source in zip(ev.params["types"], ev.params["payloads"], ev.sources,
                                        strict=True):
        catalog.check(types, settings, event_type, body, source)


def plan_one(event: Event, settings: Settings, schema: str, json_default: JsonDefault = None
              ) -> tuple[str, Any, PreparedEvent]:
    ev = prepare(event, settings.max_payload_bytes, json_default=hook(settings, json_default))
    wake = settings.wakeup == "notify"
    if ev.idempotency_key is None:
        params: Any = (ev.id, ev.type, ev.payload, ev.key, current_traceparent(), ev.tenant)
        return render(queries.EMIT_ONE_WAKE if wake else queries.EMIT_ONE, schema), params, ev
    params = {
        "id": ev.id, "type": ev.type, "payload": ev.payload, "key": ev.key,
        "ikey": ev.idempotency_key, "traceparent": current_traceparent(), "tenant": ev.tenant,
    }
    query = queries.EMIT_ONE_IDEMPOTENT_WAKE if wake else queries.EMIT_ONE_IDEMPOTENT
    return render(query, schema), params, ev


def plan_many(events: Iterable[Event], settings: Settings, schema: str,
               json_default: JsonDefault = None) -> Batch:
    cols: dict[str, list[Any]] = {
        k: [] for k in ("ids", "types", "payloads", "keys", "ikeys", "tenants")}
    traceparent = current_traceparent()
    wake = settings.wakeup == "notify"
    batch = Batch(render(queries.EMIT_MANY_WAKE if wake else queries.EMIT_MANY, schema), cols,
                   wake=wake)
    first_by_key: dict[str, int] = {}
    encode_hook = hook(settings, json_default)
    for event in events:
        ev = prepare(event, settings.max_payload_bytes, json_default=encode_hook)
        if ev.idempotency_key is not None and ev.idempotency_key in first_by_key:
            batch.slots.append(first_by_key[ev.idempotency_key])
            continue
        if ev.idempotency_key is not None:
            first_by_key[ev.idempotency_key] = len(cols["ids"])
        batch.slots.append(len(cols["ids"]))
        batch.sources.append(ev.source)
        for name, value in zip(
            cols, (ev.id, ev.type, ev.payload, ev.key, ev.idempotency_key, ev.tenant),
            strict=True
        ):
            cols[name].append(value)
    cols["traceparents"] = [traceparent] * len(cols["ids"])
    return batch


def missing_keys(batch: Batch, ids: Sequence[uuid.UUID | None]) -> list[str]:
    return [k for k, i in zip(batch.params["ikeys"], ids, strict=True) if i is None and k]


def finish(batch: Batch, ids: list[uuid.UUID | None], found: dict[str, uuid.UUID]) -> list[
    uuid.UUID
]:
    for pos, key in enumerate(batch.params["ikeys"]):
        if ids[pos] is None:
            if key not in found:
                raise OutboxError(f"idempotency key {key!r} vanished during emit")
            ids[pos] = found[key]
    return [cast(uuid.UUID, ids[slot]) for slot in batch.slots]


