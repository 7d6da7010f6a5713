"""Which events a block of code emitted: :func:`captured_events`.

    with outbox.testing.captured_events(conn) as events:
        place_order(conn)                      # the code under test, emitting
    assert events.types == ["order.placed"]

What it guarantees
    * ``events`` is filled when the block ends (also when it raises), with the events
      visible then through ``source`` that were not visible when it began, in id order
      (UUIDv7: the order one process emitted them in).
    * Through a psycopg connection it sees the connection's own uncommitted events: a block
      that emits inside a transaction still open at its end captures them; a block whose
      transaction rolled back captures none, since a rolled-back event never existed.
      Through a database URL it sees committed events only.
    * It never commits, rolls back or opens a transaction the caller sees: on an idle
      non-autocommit connection it reads in a transaction of its own and rolls that back.
    * A block that leaves the connection's transaction failed (a statement error not rolled
      back) raises :class:`~outbox.errors.OutboxError` at the end of the block, unless the
      block is already raising (then ``events`` stays empty and that error propagates).

The events are those whose id (a UUIDv7, made by the emitting process's clock) is at most
a minute older than the start of the block: clocks further apart than that are not
supported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import RowFactory, class_row, scalar_row

from outbox._db import queries
from outbox._db.connection import render
from outbox._emit.event import stored_idempotency_key
from outbox.admin.retention import uuid7_floor
from outbox.errors import OutboxError

__all__ = ["CapturedEvent", "CapturedEvents", "captured_events"]

_CLOCK_SLACK = dt.timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class CapturedEvent:
    """One emitted event, its fields as given to :class:`~outbox.Event`; ``deliveries``:
    how many endpoints it fanned out to."""

    id: uuid.UUID
    type: str
    payload: Any
    key: str | None
    tenant: str | None
    idempotency_key: str | None
    deliveries: int


class CapturedEvents(list[CapturedEvent]):
    """The events a block emitted (a list), filled when the block ends."""

    @property
    def types(self) -> list[str]:
        """Their types, in order."""
        return [event.type for event in self]


def _read(source: psycopg.Connection[Any] | str, query: str, params: dict[str, Any],
          row_factory: RowFactory[Any]) -> list[Any]:
    if isinstance(source, str):
        with psycopg.connect(source, autocommit=True) as conn, \
                conn.cursor(row_factory=row_factory) as cur:
            return cur.execute(query, params).fetchall()
    status = source.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise OutboxError("captured_events: the connection's transaction failed inside the "
                          "block; roll it back (or use conn.transaction()) before the block ends")
    opened = status == TransactionStatus.IDLE and not source.autocommit
    try:
        with source.cursor(row_factory=row_factory) as cur:
            return cur.execute(query, params).fetchall()
    finally:
        if opened:
            source.rollback()  # the read-only transaction this read opened, nothing else


def _as_emitted(row: CapturedEvent) -> CapturedEvent:
    """``row`` with the idempotency key as given (stored per tenant)."""
    if row.tenant is None or row.idempotency_key is None:
        return row
    prefix = stored_idempotency_key(row.tenant, "") or ""
    return dataclasses.replace(row, idempotency_key=row.idempotency_key.removeprefix(prefix))


@contextlib.contextmanager
def captured_events(source: psycopg.Connection[Any] | str, *,
                    schema: str = "outbox") -> Iterator[CapturedEvents]:
    """Capture the events emitted while the block runs (see the module for what is seen).

    ``source``: the psycopg connection the code under test emits on (to see its
    uncommitted events too), or a database URL (committed events only). ``schema``: the
    outbox schema (``OUTBOX_SCHEMA``). Any other ``source`` is a ``TypeError``."""
    if not isinstance(source, str | psycopg.Connection):
        raise TypeError(f"captured_events takes a psycopg Connection or a database URL, not "
                        f"{type(source).__name__} (for another handle, pass the URL)")
    floor = uuid7_floor(dt.datetime.now(dt.UTC) - _CLOCK_SLACK)
    params = {"floor": floor}
    before = set(_read(source, render(queries.EVENT_IDS_SINCE, schema), params, scalar_row))
    events = CapturedEvents()

    def fill() -> None:
        rows = _read(source, render(queries.EVENTS_SINCE, schema), params,
                     class_row(CapturedEvent))
        events.extend(_as_emitted(row) for row in rows if row.id not in before)

    try:
        yield events
    except BaseException:
        with contextlib.suppress(Exception):
            fill()
        raise
    fill()
