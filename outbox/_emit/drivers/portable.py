"""emit / emit_many over any runner (:mod:`outbox._emit.drivers.base`): the statements and
guarantees of :mod:`outbox._emit.api`, for the handles that are not psycopg 3 connections.

The events are validated and the statement planned by the very functions psycopg 3's
path uses (before any SQL), then the runner checks the caller's transaction and runs
psycopg's statement, translated to its paramstyle. ``emit_many`` always takes the
``INSERT ... SELECT FROM unnest(arrays)`` statement (one round trip; the binary COPY
is psycopg 3's alone).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from outbox._db import queries
from outbox._db.connection import render
from outbox._emit.catalog import Snapshot, database_key
from outbox._emit.drivers.base import AsyncRunner, SyncRunner, as_uuid, bind
from outbox._emit.event import Event
from outbox._emit.plan import (
    Batch,
    JsonDefault,
    catalog_read,
    catalog_snapshot,
    check_types,
    finish,
    missing_keys,
    plan_many,
    plan_one,
)
from outbox.errors import OutboxError
from outbox.settings import Settings


def _vanished(key: str | None) -> OutboxError:
    return OutboxError(f"idempotency key {key!r} vanished during emit")


def _owners_query(r: SyncRunner | AsyncRunner, schema: str, keys: list[str]
                  ) -> tuple[str, Any]:
    return bind(r.style, render(queries.EVENT_ID_BY_IDEMPOTENCY_KEY, schema), (keys,))


def _owners(rows: list[tuple[Any, ...]]) -> dict[str, uuid.UUID]:
    return {key: as_uuid(event_id) for key, event_id in rows}  # type: ignore[misc]


def _ids(rows: list[tuple[Any, ...]]) -> list[uuid.UUID | None]:
    return [as_uuid(row[0]) for row in rows]


def _types(r: SyncRunner, settings: Settings, schema: str) -> Snapshot | None:
    """The catalog to check against; read on the runner only when the held copy is stale."""
    db = database_key(r)
    read = catalog_read(settings, db, schema)
    if read is None:
        return catalog_snapshot(settings, db, schema)
    r.check()
    rows = r.rows(*bind(r.style, *read))
    return catalog_snapshot(settings, db, schema, rows[0] if rows else None, read=True)


async def _types_async(r: AsyncRunner, settings: Settings, schema: str) -> Snapshot | None:
    db = database_key(r)
    read = catalog_read(settings, db, schema)
    if read is None:
        return catalog_snapshot(settings, db, schema)
    await r.check()
    rows = await r.rows(*bind(r.style, *read))
    return catalog_snapshot(settings, db, schema, rows[0] if rows else None, read=True)


def emit(r: SyncRunner, event: Event, settings: Settings, schema: str,
         json_default: JsonDefault = None) -> uuid.UUID:
    """:func:`outbox.emit` on a runner."""
    query, params, ev = plan_one(event, settings, schema, json_default)
    check_types(_types(r, settings, schema), settings, ev)
    r.prepare_threshold = settings.prepare_threshold
    r.check()
    sql, args = bind(r.style, query, params)
    if ev.idempotency_key is None:
        r.run(sql, args)
        return ev.id
    found = _ids(r.rows(sql, args))
    event_id = found[0] if found else None
    if event_id is None:  # another transaction committed that key during our statement
        key = ev.idempotency_key
        event_id = _owners(r.rows(*_owners_query(r, schema, [key]))).get(key)
    if event_id is None:
        raise _vanished(ev.idempotency_key)
    return event_id


def emit_many(r: SyncRunner, events: Iterable[Event], settings: Settings, schema: str,
              json_default: JsonDefault = None) -> list[uuid.UUID]:
    """:func:`outbox.emit_many` on a runner."""
    batch: Batch = plan_many(events, settings, schema, json_default)
    if not batch.slots:
        return []
    check_types(_types(r, settings, schema), settings, batch)
    r.check()
    ids = _ids(r.rows(*bind(r.style, batch.query, batch.params)))
    missing = missing_keys(batch, ids)
    found = _owners(r.rows(*_owners_query(r, schema, missing))) if missing else {}
    return finish(batch, ids, found)


async def emit_async(r: AsyncRunner, event: Event, settings: Settings, schema: str,
                     json_default: JsonDefault = None) -> uuid.UUID:
    """:func:`outbox.emit_async` on a runner."""
    query, params, ev = plan_one(event, settings, schema, json_default)
    check_types(await _types_async(r, settings, schema), settings, ev)
    r.prepare_threshold = settings.prepare_threshold
    await r.check()
    sql, args = bind(r.style, query, params)
    if ev.idempotency_key is None:
        await r.run(sql, args)
        return ev.id
    found = _ids(await r.rows(sql, args))
    event_id = found[0] if found else None
    if event_id is None:
        key = ev.idempotency_key
        event_id = _owners(await r.rows(*_owners_query(r, schema, [key]))).get(key)
    if event_id is None:
        raise _vanished(ev.idempotency_key)
    return event_id


async def emit_many_async(r: AsyncRunner, events: Iterable[Event], settings: Settings,
                          schema: str, json_default: JsonDefault = None) -> list[uuid.UUID]:
    """:func:`outbox.emit_many_async` on a runner."""
    batch = plan_many(events, settings, schema, json_default)
    if not batch.slots:
        return []
    check_types(await _types_async(r, settings, schema), settings, batch)
    await r.check()
    ids = _ids(await r.rows(*bind(r.style, batch.query, batch.params)))
    missing = missing_keys(batch, ids)
    found = _owners(await r.rows(*_owners_query(r, schema, missing))) if missing else {}
    return finish(batch, ids, found)
