"""Retention: drop expired partitions, delete finished deliveries, their attempt logs,
then orphaned events.

:func:`prune` is a library function so the worker (or a cron job) can run it
periodically; ``outbox prune`` is its command line. Guarantees:

- First, every partition of deliveries and attempt logs that holds nothing that must
  survive is dropped whole (:func:`outbox.admin.partitions.drop_expired`: no per-row
  work, nothing left to vacuum); dead rows block a partition unless ``dead_too`` or they
  are older than ``dead_older_than``. Skipped with ``tenant`` (a partition holds every
  tenant's rows). So is every partition of events whose ids all precede the cutoff and
  to whose events no delivery refers any more, with their idempotency keys.
- Only rows past retention go: deliveries whose ``finished_at`` is older than the cutoff
  and whose state is ``delivered`` (and ``dead`` with ``dead_too``), with their
  ``delivery_attempts``; then events older than the cutoff that have no delivery left.
  Pending deliveries, their events and their logs are never touched.
- With ``partition_width`` (the worker's prune), rows the partition drop will take anyway
  are left to it rather than deleted one by one: rows of the partitions opened after the
  cutoff minus one width. Such a row outlives the retention by at most one partition
  width while the partition manager keeps time, and costs no DELETE, no row lock and
  nothing to vacuum. Rows of older partitions (kept by a survivor, or held open by a
  stalled manager) are deleted row by row. The same for events: those of the partitions
  of events ending after the cutoff minus two widths are left to the drop
  (PRUNE_EVENT_BOUND); the rest, and every event of events_default, one by one.
- Short transactions: ``batch_size`` rows per transaction, nothing held between batches,
  so vacuum keeps up and emits never wait long. Interrupting it loses nothing; running
  it again continues. Rows an operator is replaying at that moment are skipped.
- The cutoff is fixed once, from the database clock, when the call starts.
- With ``tenant``, only deliveries of that tenant's *events* (whichever endpoint) and that
  tenant's events go, filtered inside every batch; other tenants' rows are never locked or
  deleted. Both phases are keyset-paginated, so rows a batch leaves behind (another
  tenant's, or locked by a replay) are not read again by the same run.

Why events are found by primary key: event ids are UUIDv7, whose first 48 bits are the
Unix time in milliseconds, so "made before the cutoff" is the primary-key range
``id < uuid7(cutoff)`` and needs no ``created_at`` index (which every emit would have to
maintain). The id is made on the emitting host; ``created_at`` (the database clock) is
re-checked per row, so an app host whose clock runs slow cannot get its events pruned
early (one whose clock runs fast only gets them pruned later). Pruned events take their
idempotency keys with them: re-emitting such a key after retention makes a new event.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, scalar_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import check_tenant
from outbox.admin.partitions import drop_expired
from outbox.errors import OperationRefused

__all__ = [
    "PruneProgress",
    "PruneResult",
    "prune",
    "uuid7_floor",
]

PruneProgress = Callable[[str, int, int | None], None]
"""Called after each batch with (phase, rows done in that phase, phase total or None).
Phases: ``"partitions"`` (partitions examined, total known), ``"deliveries"`` (rows
deleted, total known) and ``"events"`` (ids examined)."""


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What was deleted, and the cutoff used (``partitions``: dropped whole)."""

    cutoff: dt.datetime
    deliveries: int
    attempts: int
    events: int
    partitions: int = 0


@dataclass(frozen=True, slots=True)
class _DeliveriesBatch:
    """One PRUNE_DELIVERIES_BATCH: the keyset cursor after it (the last row examined; None
    and 0: none), rows examined, deliveries and attempt-log rows deleted."""

    last_at: dt.datetime | None
    last_id: int
    picked: int
    deliveries: int
    attempts: int


@dataclass(frozen=True, slots=True)
class _EventsBatch:
    """One PRUNE_EVENTS_BATCH: the last id examined (None: none left), examined, deleted,
    and the idempotency keys deleted with them."""

    last_id: uuid.UUID | None
    picked: int
    deleted: int
    keys: int


_DELIVERIES_ROW = class_row(_DeliveriesBatch)
_NO_BOUND = 2**63 - 1  # every delivery id is below it
_EVENTS_ROW = class_row(_EventsBatch)


def uuid7_floor(when: dt.datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``when``'s millisecond: every id made earlier sorts below."""
    millis = int(when.timestamp() * 1000)
    return uuid.UUID(int=max(millis, 0) << 80)


def prune(
    conn: psycopg.Connection[Any],
    schema: str,
    older_than: dt.timedelta,
    dead_too: bool = False,
    batch_size: int = 1000,
    progress: PruneProgress | None = None,
    tenant: str | None = None,
    dead_older_than: dt.timedelta | None = None,
    partition_width: dt.timedelta | None = None,
) -> PruneResult:
    """Delete what is past ``older_than`` (see the module's guarantees); with ``tenant``,
    only that tenant's (None: every tenant's, and tenant-less rows). ``dead_older_than``:
    the dead-letter retention for partition drops (None: dead rows block their partition,
    unless ``dead_too``). ``partition_width``: the partitions' width, to leave to the drop
    the rows it will take (None: delete every row past the cutoff; ignored with ``tenant``).

    ``conn`` must not be inside a transaction: each batch commits on its own. Bad
    arguments (a malformed tenant id: :class:`~outbox.errors.InvalidEvent`) raise before
    anything is read or deleted.
    """
    check_tenant(tenant)
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if older_than < dt.timedelta(0):
        raise ValueError("older_than must not be negative")
    if dead_older_than is not None and dead_older_than < dt.timedelta(0):
        raise ValueError("dead_older_than must not be negative")
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise OperationRefused("prune commits batch by batch: run it outside a transaction")
    with translated(), conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
        cutoff: dt.datetime | None = cur.execute(
            queries.PRUNE_CUTOFF, (older_than.total_seconds(),)).fetchone()
    assert cutoff is not None
    partitions = 0
    if tenant is None:
        def step(done: int, total: int) -> None:
            if progress is not None:
                progress("partitions", done, total)
        partitions = drop_expired(conn, schema, older_than,
                                  older_than if dead_too else dead_older_than,
                                  progress=step).dropped
    states = ["delivered", "dead"] if dead_too else ["delivered"]
    scope = {"cutoff": cutoff, "limit": batch_size, "tenant": tenant}
    below = _row_bound(conn, schema, cutoff, partition_width if tenant is None else None)
    deliveries, attempts = _prune_deliveries(
        conn, schema, {**scope, "states": states, "below": below}, progress)
    width = partition_width if tenant is None else None
    events = _prune_events(conn, schema, {**scope, "bound": _event_bound(
        conn, schema, cutoff, width)}, progress)
    return PruneResult(cutoff, deliveries, attempts, events, partitions)


def _event_bound(conn: psycopg.Connection[Any], schema: str, cutoff: dt.datetime,
                 width: dt.timedelta | None) -> uuid.UUID:
    """The first event id left to its partition's drop (PRUNE_EVENT_BOUND), else the
    cutoff's UUIDv7 floor."""
    if width is None:
        return uuid7_floor(cutoff)
    with translated(), conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
        bound = cur.execute(render(queries.PRUNE_EVENT_BOUND, schema),
                            {"cutoff": cutoff, "width": width.total_seconds()}).fetchone()
    return uuid7_floor(cutoff) if bound is None else uuid.UUID(str(bound))


def _row_bound(conn: psycopg.Connection[Any], schema: str, cutoff: dt.datetime,
               width: dt.timedelta | None) -> int:
    """The first delivery id whose row is left to its partition's drop (PRUNE_ROW_BOUND)."""
    if width is None:
        return _NO_BOUND
    with translated(), conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
        bound = cur.execute(render(queries.PRUNE_ROW_BOUND, schema),
                            {"cutoff": cutoff, "width": width.total_seconds()}).fetchone()
    return _NO_BOUND if bound is None else int(bound)


def _prune_deliveries(
    conn: psycopg.Connection[Any], schema: str, scope: dict[str, Any],
    progress: PruneProgress | None,
) -> tuple[int, int]:
    params = {**scope, "after_at": dt.datetime.min.replace(tzinfo=dt.UTC), "after_id": 0}
    with translated(), conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
        total = int(cur.execute(render(queries.PRUNE_COUNT, schema), params,
                                prepare=False).fetchone() or 0)
    sql = render(queries.PRUNE_DELIVERIES_BATCH, schema)
    deliveries = attempts = 0
    while True:
        with translated(), conn.transaction(), conn.cursor(row_factory=_DELIVERIES_ROW) as cur:
            batch = cur.execute(sql, params, prepare=False).fetchone()
        assert batch is not None
        if not batch.picked:
            return deliveries, attempts
        deliveries += batch.deliveries
        attempts += batch.attempts
        params["after_at"], params["after_id"] = batch.last_at, batch.last_id
        if progress is not None:
            progress("deliveries", deliveries, max(total, deliveries))


def _prune_events(
    conn: psycopg.Connection[Any], schema: str, scope: dict[str, Any],
    progress: PruneProgress | None,
) -> int:
    params: dict[str, Any] = {**scope, "after": uuid.UUID(int=0)}
    sql = render(queries.PRUNE_EVENTS_BATCH, schema)
    examined = deleted = 0
    while True:
        with translated(), conn.transaction(), conn.cursor(row_factory=_EVENTS_ROW) as cur:
            batch = cur.execute(sql, params).fetchone()
        assert batch is not None
        if not batch.picked:
            return deleted
        examined += batch.picked
        deleted += batch.deleted
        params["after"] = batch.last_id
        if progress is not None:
            progress("events", examined, None)
