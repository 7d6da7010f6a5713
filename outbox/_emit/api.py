"""Transactional emit: the event commits or rolls back with the caller's own writes.

``emit(conn, event)`` runs ONE statement on the caller's psycopg connection, inside the
caller's transaction: it inserts the event and one ``deliveries`` row per enabled endpoint
of the event's tenant (plus the all-tenants endpoints) whose type filter matches (fan-out
is as transactional as the event; the routing rule is ``queries.emit._FAN_OUT``'s, the only
one, and reads the tenant's endpoints by index).

The same functions take the application's other handles, chosen by the object's type
(:mod:`outbox._emit.drivers`, which imports a driver or ORM only if the application did): a
psycopg2 connection or cursor, an asyncpg connection, a SQLAlchemy session or connection
(through the ORM's own connection, in its transaction). The guarantees below hold on each;
"autocommit" means that handle's own (asyncpg outside ``conn.transaction()``, SQLAlchemy's
``AUTOCOMMIT`` isolation; SQLAlchemy's autobegin is a transaction).

Guarantees:

- Commit of the caller's transaction: every delivery is durable and will be attempted.
  Rollback: the event never existed; no worker ever sees it.
- Outbox never commits, rolls back or opens a transaction of its own on ``conn``. A
  connection in autocommit mode outside ``conn.transaction()`` raises
  :class:`~outbox.errors.NotInTransaction` before any SQL, so an event can never commit
  without the app's writes. (A non-autocommit psycopg connection is always in a
  transaction once it runs a statement: the event commits with whatever the app commits.)
- Validation (type, JSON payload, size limit) raises :class:`~outbox.errors.InvalidEvent`
  before any SQL runs. A database error is raised as an :class:`~outbox.errors.OutboxError`
  and, as any failed statement does, aborts the caller's transaction.
- Same ``idempotency_key`` twice (in one batch, one transaction, or across transactions):
  the second emit inserts nothing and returns the first event's id.
- Wake-up (``OUTBOX_WAKEUP=notify``, the default): a transaction that wrote deliveries
  sends at most one payload-less NOTIFY, and only while some worker is idle; otherwise
  it holds a shared advisory lock until it ends (never waits for it). The NOTIFY is sent
  at commit only; a rollback sends nothing. Delivery never depends on it: workers poll too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, scalar_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit import drivers
from outbox._emit.event import Event, PreparedEvent, prepare
from outbox._emit.tracing import current_traceparent
from outbox.errors import NotInTransaction, OutboxError
from outbox.settings import Settings, get_settings

AnyConnection = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
JsonDefault = Callable[[Any], Any] | None


@dataclass(slots=True)
class _Batch:
    """Validated events, deduplicated on idempotency key, and the SQL to insert them."""

    query: str
    params: dict[str, list[Any]]
    # position in the caller's list -> position in params (first event with that key)
    slots: list[int] = field(default_factory=list)
    wake: bool = False  # OUTBOX_WAKEUP=notify: the COPY path runs queries.WAKE after it


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


def _settings_schema(schema: str | None, settings: Settings | None) -> tuple[Settings, str]:
    s = settings or get_settings()
    return s, schema or s.schema_name


def _hook(settings: Settings, json_default: JsonDefault) -> JsonDefault:
    """The caller's ``json_default``, else ``OUTBOX_JSON_DEFAULT``'s (or None)."""
    return json_default if json_default is not None else settings.json_default_hook


def _plan_one(event: Event, settings: Settings, schema: str, json_default: JsonDefault = None
              ) -> tuple[str, Any, PreparedEvent]:
    ev = prepare(event, settings.max_payload_bytes, json_default=_hook(settings, json_default))
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


def _plan_many(events: Iterable[Event], settings: Settings, schema: str,
               json_default: JsonDefault = None) -> _Batch:
    cols: dict[str, list[Any]] = {
        k: [] for k in ("ids", "types", "payloads", "keys", "ikeys", "tenants")}
    traceparent = current_traceparent()
    wake = settings.wakeup == "notify"
    batch = _Batch(render(queries.EMIT_MANY_WAKE if wake else queries.EMIT_MANY, schema), cols,
                   wake=wake)
    first_by_key: dict[str, int] = {}
    hook = _hook(settings, json_default)
    for event in events:
        ev = prepare(event, settings.max_payload_bytes, json_default=hook)
        if ev.idempotency_key is not None and ev.idempotency_key in first_by_key:
            batch.slots.append(first_by_key[ev.idempotency_key])
            continue
        if ev.idempotency_key is not None:
            first_by_key[ev.idempotency_key] = len(cols["ids"])
        batch.slots.append(len(cols["ids"]))
        for name, value in zip(
            cols, (ev.id, ev.type, ev.payload, ev.key, ev.idempotency_key, ev.tenant),
            strict=True
        ):
            cols[name].append(value)
    cols["traceparents"] = [traceparent] * len(cols["ids"])
    return batch


def _copyable(batch: _Batch) -> bool:
    return len(batch.slots) > 1 and not any(batch.params["ikeys"])


def _event_rows(batch: _Batch) -> Iterable[tuple[Any, ...]]:
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


_ROUTE_ROW = class_row(_Route)
_EVENT_COPY_TYPES = ["uuid", "text", "text", "text", "text", "text"]  # json's binary form: text
_DELIVERY_COPY_TYPES = ["uuid", "uuid", "text", "text"]


def _routes_params(batch: _Batch) -> dict[str, list[Any]]:
    """The batch's distinct (tenant, type) pairs, as ROUTES' arrays."""
    pairs = sorted(set(zip(batch.params["tenants"], batch.params["types"], strict=True)),
                   key=lambda pair: (pair[0] or "", pair[1]))
    return {"tenants": [t for t, _ in pairs], "types": [k for _, k in pairs]}


def _deliveries(batch: _Batch, routes: Sequence[_Route]
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


def _copy_many(conn: psycopg.Connection[Any], batch: _Batch, schema: str) -> list[uuid.UUID]:
    with conn.cursor(row_factory=_ROUTE_ROW) as cur:
        routes = cur.execute(render(queries.ROUTES, schema), _routes_params(batch)).fetchall()
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


async def _copy_many_async(conn: psycopg.AsyncConnection[Any], batch: _Batch, schema: str
                           ) -> list[uuid.UUID]:
    async with conn.cursor(row_factory=_ROUTE_ROW) as cur:
        await cur.execute(render(queries.ROUTES, schema), _routes_params(batch))
        routes = await cur.fetchall()
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


def _missing_keys(batch: _Batch, ids: Sequence[uuid.UUID | None]) -> list[str]:
    return [k for k, i in zip(batch.params["ikeys"], ids, strict=True) if i is None and k]


def _finish(batch: _Batch, ids: list[uuid.UUID | None], found: dict[str, uuid.UUID]) -> list[
    uuid.UUID
]:
    for pos, key in enumerate(batch.params["ikeys"]):
        if ids[pos] is None:
            if key not in found:
                raise OutboxError(f"idempotency key {key!r} vanished during emit")
            ids[pos] = found[key]
    return [cast(uuid.UUID, ids[slot]) for slot in batch.slots]


def emit(
    conn: Any,
    event: Event,
    *,
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: JsonDefault = None,
) -> uuid.UUID:
    """Insert ``event`` and its deliveries in the caller's transaction; return the event id.

    The id is the ``webhook-id`` receivers see, stable across retries and replays.
    ``conn``: a psycopg 3 ``Connection``, a psycopg2 connection or cursor, or a SQLAlchemy
    ``Session`` / ``Connection`` (:mod:`outbox._emit.drivers`); anything else is a ``TypeError``.
    """
    s, sch = _settings_schema(schema, settings)
    if not isinstance(conn, psycopg.Connection):
        from outbox._emit.drivers import portable

        return portable.emit(drivers.sync_runner(conn), event, s, sch, json_default)
    query, params, ev = _plan_one(event, s, sch, json_default)
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


def emit_many(
    conn: Any,
    events: Iterable[Event],
    *,
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: JsonDefault = None,
) -> list[uuid.UUID]:
    """Insert many events and their deliveries in one round trip's worth of work; ids in
    input order.

    All events are validated before any SQL: one invalid event writes none of them.
    Without idempotency keys the events and their deliveries go by binary COPY, routed by
    one query over the batch's distinct (tenant, type) pairs (the same rule as
    :func:`emit`, in SQL); with any key, by one ``INSERT ... ON CONFLICT`` statement.
    Either way it all commits or rolls back with the caller's transaction. On the other
    handles :func:`emit` takes, always by the ``INSERT`` statement.
    """
    s, sch = _settings_schema(schema, settings)
    if not isinstance(conn, psycopg.Connection):
        from outbox._emit.drivers import portable

        return portable.emit_many(drivers.sync_runner(conn), events, s, sch, json_default)
    batch = _plan_many(events, s, sch, json_default)
    if not batch.slots:
        return []
    _check_transaction(conn)
    if _copyable(batch):
        with translated():
            return _copy_many(conn, batch, sch)
    with translated(), conn.cursor(row_factory=scalar_row) as cur:
        ids: list[uuid.UUID | None] = cur.execute(batch.query, batch.params).fetchall()
        missing = _missing_keys(batch, ids)
        found = _key_owners(conn, sch, missing) if missing else {}
    return _finish(batch, ids, found)


async def emit_async(
    conn: Any,
    event: Event,
    *,
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: JsonDefault = None,
) -> uuid.UUID:
    """:func:`emit` for a psycopg ``AsyncConnection``, an asyncpg ``Connection`` (or pool
    connection), or a SQLAlchemy ``AsyncSession`` / ``AsyncConnection``; the same
    guarantees."""
    s, sch = _settings_schema(schema, settings)
    if not isinstance(conn, psycopg.AsyncConnection):
        from outbox._emit.drivers import portable

        return await portable.emit_async(drivers.async_runner(conn), event, s, sch,
                                         json_default)
    query, params, ev = _plan_one(event, s, sch, json_default)
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


async def emit_many_async(
    conn: Any,
    events: Iterable[Event],
    *,
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: JsonDefault = None,
) -> list[uuid.UUID]:
    """:func:`emit_many` for the handles :func:`emit_async` takes; the same guarantees."""
    s, sch = _settings_schema(schema, settings)
    if not isinstance(conn, psycopg.AsyncConnection):
        from outbox._emit.drivers import portable

        return await portable.emit_many_async(drivers.async_runner(conn), events, s, sch,
                                              json_default)
    batch = _plan_many(events, s, sch, json_default)
    if not batch.slots:
        return []
    _check_transaction(conn)
    if _copyable(batch):
        with translated():
            return await _copy_many_async(conn, batch, sch)
    with translated():
        async with conn.cursor(row_factory=scalar_row) as cur:
            await cur.execute(batch.query, batch.params)
            ids: list[uuid.UUID | None] = await cur.fetchall()
        missing = _missing_keys(batch, ids)
        found = await _key_owners_async(conn, sch, missing) if missing else {}
    return _finish(batch, ids, found)
