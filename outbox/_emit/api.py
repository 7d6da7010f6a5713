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
from collections.abc import Iterable
from typing import Any

import psycopg

from outbox._emit import drivers
from outbox._emit.drivers import portable
from outbox._emit.drivers import psycopg as pg3
from outbox._emit.event import Event
from outbox._emit.plan import JsonDefault, settings_schema
from outbox.settings import Settings

__all__ = ["emit", "emit_async", "emit_many", "emit_many_async"]


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
    ``Session`` / ``Connection``; anything else is a ``TypeError`` naming what is supported.
    """
    s, sch = settings_schema(schema, settings)
    if isinstance(conn, psycopg.Connection):
        return pg3.emit(conn, event, s, sch, json_default)
    return portable.emit(drivers.sync_runner(conn), event, s, sch, json_default)


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
    On psycopg 3 without idempotency keys the events and their deliveries go by binary
    COPY, routed by one query over the batch's distinct (tenant, type) pairs (the same rule
    as :func:`emit`, in SQL); otherwise by one ``INSERT ... ON CONFLICT`` statement.
    Either way it all commits or rolls back with the caller's transaction.
    """
    s, sch = settings_schema(schema, settings)
    if isinstance(conn, psycopg.Connection):
        return pg3.emit_many(conn, events, s, sch, json_default)
    return portable.emit_many(drivers.sync_runner(conn), events, s, sch, json_default)


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
    s, sch = settings_schema(schema, settings)
    if isinstance(conn, psycopg.AsyncConnection):
        return await pg3.emit_async(conn, event, s, sch, json_default)
    return await portable.emit_async(drivers.async_runner(conn), event, s, sch, json_default)


async def emit_many_async(
    conn: Any,
    events: Iterable[Event],
    *,
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: JsonDefault = None,
) -> list[uuid.UUID]:
    """:func:`emit_many` for the handles :func:`emit_async` takes; the same guarantees."""
    s, sch = settings_schema(schema, settings)
    if isinstance(conn, psycopg.AsyncConnection):
        return await pg3.emit_many_async(conn, events, s, sch, json_default)
    return await portable.emit_many_async(drivers.async_runner(conn), events, s, sch,
                                          json_default)
