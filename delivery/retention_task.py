"""The worker's periodic pruning: :func:`outbox.retention.prune` on a timer.

Guarantees: at most one worker prunes a schema at a time (a session advisory lock, skipped
if taken, released when done or when the connection drops); each batch is its own short
transaction; a failure is logged and retried at the next interval, never fatal. On a
server with ``autovacuum = off`` the pruner also VACUUMs the queue tables after deleting,
or the freed space would never be reused (``bench/retention.py``: 1.7x growth in three
minutes without it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable

import psycopg
from psycopg.rows import scalar_row

from outbox.db import render
from outbox.delivery import queries
from outbox.delivery.settings import WorkerSettings
from outbox.errors import OutboxError
from outbox.retention import PruneResult, prune

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
    with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=5) as conn:
        with conn.cursor(row_factory=scalar_row) as cur:
            locked = cur.execute(queries.PRUNE_TRY_LOCK, (schema,)).fetchone()
        if not locked:
            return None
        try:
            result = prune(conn, schema, dt.timedelta(seconds=settings.retention_seconds),
                           batch_size=settings.prune_batch_size, progress=progress)
            if result.deliveries or result.events:
                _vacuum_if_no_autovacuum(conn, schema)
            return result
        except _Interrupted:
            return None
        finally:
            conn.execute(queries.PRUNE_UNLOCK, (schema,))


def _vacuum_if_no_autovacuum(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    with conn.cursor(row_factory=scalar_row) as cur:
        autovacuum_off = cur.execute(queries.AUTOVACUUM_OFF).fetchone()
    if autovacuum_off:
        conn.execute(render(queries.VACUUM_QUEUE, schema))


async def prune_loop(settings: WorkerSettings, stopped: asyncio.Event) -> None:
    """Every ``prune_interval_seconds`` until ``stopped``, the first run one interval in."""
    while not stopped.is_set():
        try:
            async with asyncio.timeout(settings.prune_interval_seconds):
                await stopped.wait()
            return
        except TimeoutError:
            pass
        try:
            result = await asyncio.to_thread(prune_once, settings, stopped.is_set)
        except (OutboxError, psycopg.Error) as exc:
            log.warning("prune failed: %s", str(exc).splitlines()[0] if str(exc) else exc)
            continue
        if result is not None and (result.deliveries or result.events):
            log.info("pruned", extra={"deliveries": result.deliveries,
                                      "attempts": result.attempts, "events": result.events})
