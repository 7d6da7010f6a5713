"""Partitions of the delivery history: list them, create them ahead, drop the expired ones.

Deliveries and their attempt logs are partitioned by delivery id, one partition per
``OUTBOX_PARTITION_SECONDS`` of emits (the design, and why nothing is ever moved between
partitions: migrations/0018_partitioned_history.sql; docs/guides/partitions.md). The
logic is in SQL functions of that migration, so the worker, ``outbox partitions`` and
``outbox prune`` run the very same checks; this module calls them.

Guarantees:

- :func:`advance` opens the next partition once the open one is ``width`` seconds old and
  keeps ``ahead`` empty partitions created past it; one caller at a time per schema (a
  transaction-level advisory lock); it never blocks claims (CREATE TABLE, then ATTACH:
  SHARE UPDATE EXCLUSIVE on the parents), and emits only for the milliseconds of an
  events partition's ATTACH (ACCESS EXCLUSIVE on events, waited for at most 200 ms). One
  short transaction.
- :func:`drop_expired` drops, one partition per transaction, every partition that holds
  no row that must survive: closed before the retention's cutoff, no pending, fresh or
  waiting delivery, no dead head holding its ordered key, no dead delivery younger than
  the dead-letter retention, no delivery finished within the retention. The check is
  repeated under the parents' ACCESS EXCLUSIVE lock, held for milliseconds (catalog work),
  whose wait is bounded by ``lock_timeout_ms``: a busy table makes that partition wait for
  the next call (counted in ``DropResult.busy``), never a failure. A crash between
  partitions loses nothing: each drop commits on its own or not at all.
- Events are partitioned by id, one partition per ``width`` of UUIDv7 ids (their emitting
  clock's time; migrations/0025_partitioned_events.sql): :func:`advance` keeps them made
  ahead too, and :func:`drop_expired` drops every partition of events whose ids all
  precede the cutoff and to whose events no delivery refers, with their idempotency keys,
  one transaction each, under the same bounded lock wait (on events).
- The transactions of :func:`advance` and :func:`drop_expired` commit with
  ``synchronous_commit = local``: a synchronous standby that is missing cannot keep their
  locks, and the emits queued behind them, until it returns. A catalog change lost with
  the primary is redone by the next pass.
- :func:`status` and :func:`event_status` read; they write nothing.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, scalar_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox.errors import OperationRefused

__all__ = [
    "DropProgress",
    "DropResult",
    "EventPartition",
    "Partition",
    "advance",
    "drop_expired",
    "event_status",
    "status",
]

DropProgress = Callable[[int, int], None]
"""Called after each partition examined with (partitions examined, partitions to examine)."""


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition of deliveries and its twin of delivery_attempts.

    ``lo``/``hi``: its delivery ids (``lo`` None: from the lowest, the table converted by
    the migration); ``opened_at``/``closed_at``: when emits started and stopped writing to
    it (None: not yet); ``rows_estimate``: deliveries, from the planner's statistics;
    ``bytes``: both tables with their indexes; ``blocked_by``: why it is not droppable now
    (``open``, ``ahead``, ``within retention``, ``pending deliveries``, ...), None: it is."""

    k: int
    deliveries: str
    attempts: str
    lo: int | None
    hi: int
    opened_at: dt.datetime | None
    closed_at: dt.datetime | None
    rows_estimate: int
    bytes: int
    blocked_by: str | None

    @property
    def droppable(self) -> bool:
        """Nothing in it must survive: the next drop takes it."""
        return self.blocked_by is None


@dataclass(frozen=True, slots=True)
class EventPartition:
    """One partition of events: ``lo``/``hi``, its event ids (``lo`` None: from the lowest,
    the table converted by the migration); ``rows_estimate``: from the planner's
    statistics; ``bytes``: with its indexes; ``blocked_by``: why it is not droppable now
    (``within retention``, ``deliveries refer to its events``), None: it is."""

    name: str
    lo: uuid.UUID | None
    hi: uuid.UUID
    rows_estimate: int
    bytes: int
    blocked_by: str | None

    @property
    def droppable(self) -> bool:
        """Nothing in it must survive: the next drop takes it."""
        return self.blocked_by is None


@dataclass(frozen=True, slots=True)
class DropResult:
    """Partitions of deliveries dropped, kept (something blocks them) and busy (lock not
    granted in time: retried at the next call), with the cutoffs used; partitions of
    events dropped and busy."""

    cutoff: dt.datetime
    dead_cutoff: dt.datetime | None
    dropped: int
    kept: int
    busy: int
    events_dropped: int = 0
    events_busy: int = 0


_PARTITION_ROW = class_row(Partition)
_EVENT_PARTITION_ROW = class_row(EventPartition)


def _check(retention: dt.timedelta, dead_retention: dt.timedelta | None) -> None:
    if retention < dt.timedelta(0):
        raise ValueError("retention must not be negative")
    if dead_retention is not None and dead_retention < dt.timedelta(0):
        raise ValueError("dead_retention must not be negative")


def _cutoffs(conn: psycopg.Connection[Any], retention: dt.timedelta,
             dead_retention: dt.timedelta | None) -> dict[str, Any]:
    with translated(), conn.cursor() as cur:
        row = cur.execute(queries.PARTITION_CUTOFFS, {
            "retention": retention.total_seconds(),
            "dead": None if dead_retention is None else dead_retention.total_seconds(),
        }).fetchone()
    assert row is not None
    return {"cutoff": row[0], "dead_cutoff": row[1]}


def status(conn: psycopg.Connection[Any], schema: str, retention: dt.timedelta,
           dead_retention: dt.timedelta | None = None) -> list[Partition]:
    """Every partition, oldest first, and what blocks its drop with this ``retention``
    (finished rows kept that long) and ``dead_retention`` (dead rows kept that long; None:
    for ever, until replayed or pruned with ``dead_too``). Reads only."""
    _check(retention, dead_retention)
    with translated(), conn.cursor(row_factory=_PARTITION_ROW) as cur:
        params = _cutoffs(conn, retention, dead_retention)
        return cur.execute(render(queries.PARTITION_STATUS, schema), params).fetchall()


def event_status(conn: psycopg.Connection[Any], schema: str,
                 retention: dt.timedelta) -> list[EventPartition]:
    """Every partition of events, oldest first, and what blocks its drop with this
    ``retention``. Reads only."""
    _check(retention, None)
    with translated(), conn.cursor(row_factory=_EVENT_PARTITION_ROW) as cur:
        params = _cutoffs(conn, retention, None)
        return cur.execute(render(queries.EVENT_PARTITION_STATUS, schema), params).fetchall()


def advance(conn: psycopg.Connection[Any], schema: str, width: dt.timedelta,
            ahead: int = 1) -> int:
    """Open the next partition if the open one is ``width`` old, and keep ``ahead``
    partitions created past it (see the module's guarantees). Returns how many it created.
    Commits, unless ``conn`` is inside a transaction (then the caller's commit does, with
    the caller's ``synchronous_commit``)."""
    if width < dt.timedelta(seconds=1):
        raise ValueError("the partition width must be at least 1 second")
    if ahead < 1:
        raise ValueError("ahead must be at least 1")
    own = conn.info.transaction_status == TransactionStatus.IDLE
    with translated(), conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
        if own:
            cur.execute(queries.LOCAL_COMMIT)
        made = cur.execute(render(queries.PARTITIONS_ADVANCE, schema),
                           {"width": width.total_seconds(), "ahead": ahead}).fetchone()
    return int(made or 0)


def drop_expired(conn: psycopg.Connection[Any], schema: str, retention: dt.timedelta,
                 dead_retention: dt.timedelta | None = None, lock_timeout_ms: int = 500,
                 progress: DropProgress | None = None) -> DropResult:
    """Drop every droppable partition (see the module's guarantees), one transaction each.
    ``conn`` must not be inside a transaction. Bad arguments raise before anything is read.
    """
    _check(retention, dead_retention)
    if lock_timeout_ms < 1:
        raise ValueError("lock_timeout_ms must be at least 1")
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise OperationRefused("partitions are dropped one transaction each: run it outside"
                               " a transaction")
    with conn.transaction():
        params = _cutoffs(conn, retention, dead_retention)
    parts = status(conn, schema, retention, dead_retention)
    candidates = [p for p in parts if p.droppable]
    dropped = busy = 0
    sql = render(queries.PARTITION_DROP, schema)
    for done, part in enumerate(candidates, 1):
        with translated():
            try:
                with conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
                    cur.execute(queries.LOCAL_COMMIT)
                    if cur.execute(sql, {**params, "k": part.k,
                                         "lock_timeout_ms": lock_timeout_ms}).fetchone():
                        dropped += 1
            except errors.LockNotAvailable:
                busy += 1
        if progress is not None:
            progress(done, len(candidates))
    events_dropped, events_busy = _drop_events(conn, schema, retention, lock_timeout_ms)
    return DropResult(params["cutoff"], params["dead_cutoff"], dropped,
                      len(parts) - dropped - busy, busy, events_dropped, events_busy)


def _drop_events(conn: psycopg.Connection[Any], schema: str, retention: dt.timedelta,
                 lock_timeout_ms: int) -> tuple[int, int]:
    """Drop every droppable partition of events, one transaction each: (dropped, busy)."""
    with conn.transaction():
        params = _cutoffs(conn, retention, None)
    dropped = busy = 0
    sql = render(queries.EVENT_PARTITION_DROP, schema)
    for part in event_status(conn, schema, retention):
        if not part.droppable:
            continue
        with translated():
            try:
                with conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
                    cur.execute(queries.LOCAL_COMMIT)
                    if cur.execute(sql, {"cutoff": params["cutoff"], "name": part.name,
                                         "lock_timeout_ms": lock_timeout_ms}).fetchone():
                        dropped += 1
            except errors.LockNotAvailable:
                busy += 1
    return dropped, busy
