"""Retention: delete finished deliveries, their attempt logs, then orphaned events.

:func:`prune` is a library function so the worker (or a cron job) can run it
periodically; ``outbox prune`` is its command line. Guarantees:

- Only rows past retention go: deliveries whose ``finished_at`` is older than the cutoff
  and whose state is ``delivered`` (and ``dead`` with ``dead_too``), with their
  ``delivery_attempts``; then events older than the cutoff that have no delivery left.
  Pending deliveries, their events and their logs are never touched.
- Short transactions: ``batch_size`` rows per transaction, nothing held between batches,
  so vacuum keeps up and emits never wait long. Interrupting it loses nothing; running
  it again continues. Rows an operator is replaying at that moment are skipped.
- The cutoff is fixed once, from the database clock, when the call starts.

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

from outbox import queries
from outbox.db import render, translated
from outbox.errors import OperationRefused

PruneProgress = Callable[[str, int, int | None], None]
"""Called after each batch with (phase, rows done in that phase, phase total or None).
Phases: ``"deliveries"`` (rows deleted, total known) and ``"events"`` (ids examined)."""


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What was deleted, and the cutoff used."""

    cutoff: dt.datetime
    deliveries: int
    attempts: int
    events: int


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
) -> PruneResult:
    """Delete what is past ``older_than`` (see the module's guarantees).

    ``conn`` must not be inside a transaction: each batch commits on its own.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if older_than < dt.timedelta(0):
        raise ValueError("older_than must not be negative")
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise OperationRefused("prune commits batch by batch: run it outside a transaction")
    with translated(), conn.transaction():
        row = conn.execute(queries.PRUNE_CUTOFF, (older_than.total_seconds(),)).fetchone()
    assert row is not None
    cutoff: dt.datetime = row[0]
    states = ["delivered", "dead"] if dead_too else ["delivered"]
    deliveries, attempts = _prune_deliveries(conn, schema, cutoff, states, batch_size, progress)
    events = _prune_events(conn, schema, cutoff, batch_size, progress)
    return PruneResult(cutoff, deliveries, attempts, events)


def _prune_deliveries(
    conn: psycopg.Connection[Any], schema: str, cutoff: dt.datetime, states: list[str],
    batch_size: int, progress: PruneProgress | None,
) -> tuple[int, int]:
    params = {"states": states, "cutoff": cutoff, "limit": batch_size}
    with translated(), conn.transaction():
        row = conn.execute(render(queries.PRUNE_COUNT, schema), params).fetchone()
    total = int(row[0]) if row else 0
    sql = render(queries.PRUNE_DELIVERIES_BATCH, schema)
    deliveries = attempts = 0
    while True:
        with translated(), conn.transaction():
            row = conn.execute(sql, params).fetchone()
        assert row is not None
        if not row[0]:
            return deliveries, attempts
        deliveries += int(row[0])
        attempts += int(row[1])
        if progress is not None:
            progress("deliveries", deliveries, max(total, deliveries))


def _prune_events(
    conn: psycopg.Connection[Any], schema: str, cutoff: dt.datetime, batch_size: int,
    progress: PruneProgress | None,
) -> int:
    params: dict[str, Any] = {"after": uuid.UUID(int=0), "bound": uuid7_floor(cutoff),
                              "cutoff": cutoff, "limit": batch_size}
    sql = render(queries.PRUNE_EVENTS_BATCH, schema)
    examined = deleted = 0
    while True:
        with translated(), conn.transaction():
            row = conn.execute(sql, params).fetchone()
        assert row is not None
        last, picked, gone = row
        if not picked:
            return deleted
        examined += int(picked)
        deleted += int(gone)
        params["after"] = last
        if progress is not None:
            progress("events", examined, None)
