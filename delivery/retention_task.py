"""The worker's periodic pruning: :func:`outbox.admin.retention.prune` on a timer, the
partition manager (:func:`partition_once`: partitions created ahead, expired ones dropped,
:mod:`outbox.admin.partitions`), and the repair pass of ordered keys left without a head
(:func:`repair_once`).

Guarantees: at most one worker prunes a schema at a time (a session advisory lock, skipped
if taken, released when done or when the connection drops) where the connection is a
session of its own; behind a pooler (:func:`outbox.delivery.session.direct`) no session
lock is taken -- it could stay behind on a shared server connection -- and two workers may
prune at once (each batch skips rows another holds; the work is only repeated). Each batch
is its own short transaction; a failure is logged and retried at the next interval, never
fatal. The worker's prune passes the partition width, so rows the partition drop will take
are left to it (``prune(partition_width=...)``: a delivered row outlives the retention by at
most one partition width, and costs no DELETE). On a server with ``autovacuum = off``
the pruner also VACUUMs the queue tables after deleting, or the freed space would never be
reused (``bench/retention.py``: 1.7x growth in three minutes without it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg.rows import scalar_row

from outbox._db.connection import render
from outbox.admin.partitions import DropResult, advance, drop_expired
from outbox.admin.retention import PruneResult, prune
from outbox.delivery import queries
from outbox.delivery.session import direct_sync
from outbox.delivery.settings import WorkerSettings
from outbox.errors import OutboxError

log = logging.getLogger("outbox.worker")


class _Interrupted(Exception):
    pass


def prune_once(settings: WorkerSettings, should_stop: Callable[[], bool] = lambda: False
               ) -> PruneResult | None:
    """Prune now unless another worker is; None when skipped. ``should_stop`` is checked
    after every batch (each already committed), so shutdown never waits for a long prune."""

    def progress(_phase: str, _done: int, _total: int | None) -> None:
        if should_stop():
            raise _Interrupted
    schema = settings.schema_name
    with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=5,
                         prepare_threshold=settings.prepare_threshold) as conn:
        locking = direct_sync(conn)  # a session lock needs a session of its own
        if locking:
            with conn.cursor(row_factory=scalar_row) as cur:
                if not cur.execute(queries.PRUNE_TRY_LOCK, (schema,)).fetchone():
                    return None
        try:
            result = prune(conn, schema, dt.timedelta(seconds=settings.retention_seconds),
                           batch_size=settings.prune_batch_size, progress=progress,
                           dead_older_than=_dead_retention(settings),
                           partition_width=dt.timedelta(seconds=partition_width(settings)))
            if result.deliveries or result.events:
                _vacuum_if_no_autovacuum(conn, schema)
            return result
        except _Interrupted:
            return None
        finally:
            if locking and not conn.broken:
                conn.execute(queries.PRUNE_UNLOCK, (schema,))


def _vacuum_if_no_autovacuum(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    with conn.cursor(row_factory=scalar_row) as cur:
        autovacuum_off = cur.execute(queries.AUTOVACUUM_OFF).fetchone()
    if autovacuum_off:
        conn.execute(render(queries.VACUUM_QUEUE, schema))


def _dead_retention(settings: WorkerSettings) -> dt.timedelta | None:
    seconds = settings.dead_retention_seconds
    return dt.timedelta(seconds=seconds) if seconds else None


PARTITIONS_AHEAD = 1
"""Empty partitions kept created past the open one (each partition kept, empty or not,
costs every claim's planning a little: tests/integration/test_partitions.py, bench.history
--partitions)."""


def partition_width(settings: WorkerSettings) -> float:
    """OUTBOX_PARTITION_SECONDS, or when it is 0 (auto) a third of the retention (at least
    an hour; a day without retention): about five partitions are kept at any time."""
    if settings.partition_seconds:
        return settings.partition_seconds
    if not settings.retention_seconds:
        return 86400.0
    return max(settings.retention_seconds / 3, 3600.0)


def partition_tick(settings: WorkerSettings) -> float:
    """Seconds between two partition passes: a quarter of a partition, at most a minute."""
    return min(partition_width(settings) / 4, 60.0)


def partition_once(settings: WorkerSettings) -> tuple[int, DropResult | None]:
    """One pass of the partition manager: open the next partition when the open one is
    :func:`partition_width` old and keep :data:`PARTITIONS_AHEAD` created past it; then, unless
    ``retention_seconds`` is 0, drop the partitions that hold nothing that must survive.
    Every worker may run it: the SQL functions serialise callers with an advisory lock, and
    each step is its own short transaction. Returns (partitions created, drops)."""
    with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=5,
                         prepare_threshold=settings.prepare_threshold) as conn:
        made = advance(conn, settings.schema_name,
                       dt.timedelta(seconds=partition_width(settings)), PARTITIONS_AHEAD)
        if not settings.retention_seconds:
            return made, None
        return made, drop_expired(conn, settings.schema_name,
                                  dt.timedelta(seconds=settings.retention_seconds),
                                  _dead_retention(settings))


async def partition_loop(settings: WorkerSettings, stopped: asyncio.Event) -> None:
    """:func:`partition_once` every :func:`partition_tick` seconds until ``stopped``, the
    first at once. A failure is logged and retried at the next tick, never fatal."""
    while not stopped.is_set():
        try:
            made, dropped = await asyncio.to_thread(partition_once, settings)
        except (OutboxError, psycopg.Error) as exc:
            log.warning("partition maintenance failed: %s", _first_line(exc))
        else:
            if made or (dropped is not None and dropped.dropped):
                log.info("partitions", extra={  # ("created" is a LogRecord attribute)
                    "partitions_created": made,
                    "partitions_dropped": dropped.dropped if dropped else 0,
                    "partitions_kept": dropped.kept if dropped else 0})
        try:
            async with asyncio.timeout(partition_tick(settings)):
                await stopped.wait()
            return
        except TimeoutError:
            pass


REPAIR_KEYS = 1000
"""Ordered keys visited per repair pass (one index descent each)."""


@dataclass
class RepairPosition:
    """Where the next repair pass starts: after this (endpoint, key); None: the start."""

    endpoint: uuid.UUID | None = None
    key: str | None = None


def repair_once(settings: WorkerSettings, position: RepairPosition,
                keys: int = REPAIR_KEYS) -> int:
    """One bounded pass over ordered keys with queued deliveries (up to ``keys`` of them,
    from ``position``, which moves on; it wraps around at the end): each one without a
    head gets one (queries.REPAIR_HEADLESS), so a key left headless by a worker older than
    migration 0005 or by hand is delivered again. Returns how many heads it made. Safe
    beside running workers (each key is re-checked under its lock), one short transaction.
    """
    with psycopg.connect(settings.database_url, connect_timeout=5,
                         prepare_threshold=settings.prepare_threshold) as conn:
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED  # this transaction's
        row = conn.execute(render(queries.REPAIR_HEADLESS, settings.schema_name),
                           {"keys": keys, "after_endpoint": position.endpoint,
                            "after_key": position.key}).fetchone()
        conn.commit()
    assert row is not None
    _visited, position.endpoint, position.key, promoted = row
    return int(promoted)


async def prune_loop(settings: WorkerSettings, stopped: asyncio.Event) -> None:
    """Every ``prune_interval_seconds`` until ``stopped``, the first run one interval in:
    prune (unless ``retention_seconds`` is 0), then one ordered-key repair pass."""
    position = RepairPosition()
    while not stopped.is_set():
        try:
            async with asyncio.timeout(settings.prune_interval_seconds):
                await stopped.wait()
            return
        except TimeoutError:
            pass
        if settings.retention_seconds:
            await _prune(settings, stopped)
        try:
            made = await asyncio.to_thread(repair_once, settings, position)
        except (OutboxError, psycopg.Error) as exc:
            log.warning("ordered key repair failed: %s", _first_line(exc))
            continue
        if made:
            log.warning("gave %d ordered key(s) without a head their next delivery (a worker"
                        " older than migration 0005, or a manual change)", made)


async def _prune(settings: WorkerSettings, stopped: asyncio.Event) -> None:
    try:
        result = await asyncio.to_thread(prune_once, settings, stopped.is_set)
    except (OutboxError, psycopg.Error) as exc:
        log.warning("prune failed: %s", _first_line(exc))
        return
    if result is not None and (result.deliveries or result.events):
        log.info("pruned", extra={"deliveries": result.deliveries,
                                  "attempts": result.attempts, "events": result.events})


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
