"""Emit on a psycopg 3 ``Connection`` / ``AsyncConnection``: the plan's statement on the
caller's connection, in the caller's transaction, through cursors with outbox's own row
factories (the caller's ``row_factory`` never matters). ``emit_many`` without idempotency
keys writes by binary COPY: the events, then one delivery per routed endpoint, routed by
one query over the batch's distinct (tenant, type) pairs (the rule of the INSERT
statement, in SQL); a batch routed to an endpoint with a payload filter is written by the
INSERT statement instead (its fan-out evaluates the filter on each event's payload in SQL,
the one evaluator; nothing was written before that choice). The guarantees are
:mod:`outbox._emit.api`'s."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, scalar_row, tuple_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.catalog import Snapshot, database_key
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
from outbox.errors import NotInTransaction, OutboxError
from outbox.settings import Settings

AnyConnection = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class _KeyOwner:
    """The event holding an idempotency key (EVENT_ID_BY_IDEMPOTENCY_KEY)."""

    idempotency_key: str
    id: uuid.UUID


# Every read runs on a cursor with its own row factory: the caller's connection may have
# any row_factory (dict_row, ...), and what outbox reads must not depend on it.
_KEY_OWNER_ROW = class_row(_KeyOwner)


def _check_transaction(conn: AnyConnection) -> None:
    status = conn.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise NotInTransaction(
            "the connection's transaction has failed: roll back before emitting"
        )
    if conn.autocommit and status == TransactionStatus.IDLE:
        raise NotInTransaction(
            "connection is in autocommit mode outside a transaction: emit inside "
            "`with conn.transaction():` so the event commits with your own writes"
        )


def _copyable(batch: Batch) -> bool:
    return len(batch.slots) > 1 and not any(batch.params["ikeys"])


def _event_rows(batch: Batch) -> Iterable[tuple[Any, ...]]:
    p = batch.params
    return zip(p["ids"], p["types"], p["payloads"], p["keys"], p["traceparents"], p["tenants"],
               strict=True)


@dataclass(frozen=True, slots=True)
class _Route:
    """An endpoint that takes events of (tenant, type) (ROUTES)."""

    tenant: str | None
    type: str
    endpoint_id: uuid.UUID
    ordered: bool
    filtered: bool  # a payload filter: the batch goes by the INSERT statement


_ROUTE_ROW = class_row(_Route)
_EVENT_COPY_TYPES = ["uuid", "text", "text", "text", "text", "text"]  # json's binary form: text
_DELIVERY_COPY_TYPES = ["uuid", "uuid", "text", "text"]


def _routes_params(batch: Batch) -> dict[str, list[Any]]:
    """The batch's distinct (tenant, type) pairs, as ROUTES' arrays."""
    pairs = sorted(set(zip(batch.params["tenants"], batch.params["types"], strict=True)),
                   key=lambda pair: (pair[0] or "", pair[1]))
    return {"tenants": [t for t, _ in pairs], "types": [k for _, k in pairs]}


def _deliveries(batch: Batch, routes: Sequence[_Route]
                ) -> Iterable[tuple[Any, Any, str | None, str]]:
    """(event id, endpoint id, key, state) for every event and every endpoint routed its
    (tenant, type), in event order; key and state as queries.emit._KEY and _STATE."""
    targets: dict[tuple[str | None, str], list[_Route]] = {}
    for route in routes:
        targets.setdefault((route.tenant, route.type), []).append(route)
    p = batch.params
    for event_id, tenant, etype, key in zip(p["ids"], p["tenants"], p["types"], p["keys"],
                                            strict=True):
        for r in targets.get((tenant, etype), ()):
            ordered = r.ordered and key is not None
            yield event_id, r.endpoint_id, key if ordered else None, (
                "fresh" if ordered else "pending")


def _copy_many(conn: psycopg.Connection[Any], batch: Batch, schema: str
               ) -> list[uuid.UUID] | None:
    """The batch by COPY; None (nothing written) if an endpoint routed has a filter."""
    with conn.cursor(row_factory=_ROUTE_ROW) as cur:
        routes = cur.execute(render(queries.ROUTES, schema), _routes_params(batch)).fetchall()
        if any(r.filtered for r in routes):
            return None
        with cur.copy(render(queries.COPY_EVENTS, schema)) as copy:
            copy.set_types(_EVENT_COPY_TYPES)
            for row in _event_rows(batch):
                copy.write_row(row)
        with cur.copy(render(queries.COPY_DELIVERIES, schema)) as copy:
            copy.set_types(_DELIVERY_COPY_TYPES)
            for pair in _deliveries(batch, routes):
                copy.write_row(pair)
        if batch.wake and routes:
            cur.execute(render(queries.WAKE, schema))
    return list(batch.params["ids"])


async def _copy_many_async(conn: psycopg.AsyncConnection[Any], batch: Batch, schema: str
                           ) -> list[uuid.UUID] | None:
    async with conn.cursor(row_factory=_ROUTE_ROW) as cur:
        await cur.execute(render(queries.ROUTES, schema), _routes_params(batch))
        routes = await cur.fetchall()
        if any(r.filtered for r in routes):
            return None
        async with cur.copy(render(queries.COPY_EVENTS, schema)) as copy:
            copy.set_types(_EVENT_COPY_TYPES)
            for row in _event_rows(batch):
                await copy.write_row(row)
        async with cur.copy(render(queries.COPY_DELIVERIES, schema)) as copy:
            copy.set_types(_DELIVERY_COPY_TYPES)
            for pair in _deliveries(batch, routes):
                await copy.write_row(pair)
        if batch.wake and routes:
            await cur.execute(render(queries.WAKE, schema))
    return list(batch.params["ids"])


def _key_owners(conn: psycopg.Connection[Any], schema: str, keys: list[str]
                ) -> dict[str, uuid.UUID]:
    """Second look for keys another transaction committed during our statement."""
    with conn.cursor(row_factory=_KEY_OWNER_ROW) as cur:
        cur.execute(render(queries.EVENT_ID_BY_IDEMPOTENCY_KEY, schema), (keys,))
        return {owner.idempotency_key: owner.id for owner in cur.fetchall()}


async def _key_owners_async(conn: psycopg.AsyncConnection[Any], schema: str, keys: list[str]
                            ) -> dict[str, uuid.UUID]:
    async with conn.cursor(row_factory=_KEY_OWNER_ROW) as cur:
        await cur.execute(render(queries.EVENT_ID_BY_IDEMPOTENCY_KEY, schema), (keys,))
        return {owner.idempotency_key: owner.id for owner in await cur.fetchall()}


def _types(conn: psycopg.Connection[Any], s: Settings, sch: str) -> Snapshot | None:
    """The catalog to check against; read on ``conn`` only when the held copy is stale."""
    db = database_key(conn)
    read = catalog_read(s, db, sch)
    if read is None:
        return catalog_snapshot(s, db, sch)
    _check_transaction(conn)
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(*read).fetchone()
    return catalog_snapshot(s, db, sch, row, read=True)


async def _types_async(conn: psycopg.AsyncConnection[Any], s: Settings, sch: str
                       ) -> Snapshot | None:
    db = database_key(conn)
    read = catalog_read(s, db, sch)
    if read is None:
        return catalog_snapshot(s, db, sch)
    _check_transaction(conn)
    with translated():
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(*read)
            row = await cur.fetchone()
    return catalog_snapshot(s, db, sch, row, read=True)


def emit(conn: psycopg.Connection[Any], event: Event, s: Settings, sch: str,
         json_default: JsonDefault = None) -> uuid.UUID:
    """:func:`outbox.emit` on a psycopg 3 ``Connection``."""
    query, params, ev = plan_one(event, s, sch, json_default)
    check_types(_types(conn, s, sch), s, ev)
    _check_transaction(conn)
    with translated(), conn.cursor(row_factory=scalar_row) as cur:
        cur.execute(query, params)
        if ev.idempotency_key is None:
            return ev.id
        event_id = cur.fetchone()
        if event_id is None:  # another transaction committed that key during our statement
            key = ev.idempotency_key
            event_id = _key_owners(conn, sch, [key]).get(key)
    if event_id is None:
        raise OutboxError(f"idempotency key {ev.idempotency_key!r} vanished during emit")
    return cast(uuid.UUID, event_id)


def emit_many(conn: psycopg.Connection[Any], events: Iterable[Event], s: Settings,
              sch: str, json_default: JsonDefault = None) -> list[uuid.UUID]:
    """:func:`outbox.emit_many` on a psycopg 3 ``Connection`` (binary COPY without
    idempotency keys)."""
    batch = plan_many(events, s, sch, json_default)
    if not batch.slots:
        return []
    check_types(_types(conn, s, sch), s, batch)
    _check_transaction(conn)
    if _copyable(batch):
        with translated():
            copied = _copy_many(conn, batch, sch)
        if copied is not None:
            return copied
    with translated(), conn.cursor(row_factory=scalar_row) as cur:
        ids: list[uuid.UUID | None] = cur.execute(batch.query, batch.params).fetchall()
        missing = missing_keys(batch, ids)
        found = _key_owners(conn, sch, missing) if missing else {}
    return finish(batch, ids, found)


async def emit_async(conn: psycopg.AsyncConnection[Any], event: Event, s: Settings,
                     sch: str, json_default: JsonDefault = None) -> uuid.UUID:
    """:func:`outbox.emit_async` on a psycopg 3 ``AsyncConnection``."""
    query, params, ev = plan_one(event, s, sch, json_default)
    check_types(await _types_async(conn, s, sch), s, ev)
    _check_transaction(conn)
    with translated():
        async with conn.cursor(row_factory=scalar_row) as cur:
            await cur.execute(query, params)
            if ev.idempotency_key is None:
                return ev.id
            event_id = await cur.fetchone()
        if event_id is None:
            key = ev.idempotency_key
            event_id = (await _key_owners_async(conn, sch, [key])).get(key)
    if event_id is None:
        raise OutboxError(f"idempotency key {ev.idempotency_key!r} vanished during emit")
    return cast(uuid.UUID, event_id)


async def emit_many_async(conn: psycopg.AsyncConnection[Any], events: Iterable[Event],
                          s: Settings, sch: str, json_default: JsonDefault = None
                          ) -> list[uuid.UUID]:
    """:func:`outbox.emit_many_async` on a psycopg 3 ``AsyncConnection``."""
    batch = plan_many(events, s, sch, json_default)
    if not batch.slots:
        return []
    check_types(await _types_async(conn, s, sch), s, batch)
    _check_transaction(conn)
    if _copyable(batch):
        with translated():
            copied = await _copy_many_async(conn, batch, sch)
        if copied is not None:
            return copied
    with translated():
        async with conn.cursor(row_factory=scalar_row) as cur:
            await cur.execute(batch.query, batch.params)
            ids: list[uuid.UUID | None] = await cur.fetchall()
        missing = missing_keys(batch, ids)
        found = await _key_owners_async(conn, sch, missing) if missing else {}
    return finish(batch, ids, found)
