"""Dead letters: list them (a page at a time), inspect one with its attempt log, and skip
the dead head of an ordered key. Replay lives in :mod:`outbox.admin.replay`.

- **Read-only listing.** :func:`list_dead` and :func:`show` change nothing; a page is a
  keyset on (finished_at, id), so every dead row is reached exactly once.
- **Tenant scoping.** A :class:`Selection` with ``tenant`` picks only deliveries of that
  tenant's *events* (whichever endpoint, an all-tenants one included).
- **Ordered endpoints.** A dead delivery that still holds its key blocks the key: the
  key's later deliveries wait. :func:`skip` releases the key without it (replay puts it
  back at the head instead).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import check_tenant, check_type
from outbox.admin import endpoints as ep
from outbox.admin._paging import MAX_PAGE
from outbox.errors import DeliveryNotFound, OperationRefused

__all__ = [
    "Attempt",
    "DeadCursor",
    "DeadDelivery",
    "DeadPage",
    "DeliveryDetail",
    "Selection",
    "SkipResult",
    "each_dead",
    "list_dead",
    "parse_delivery_id",
    "show",
    "skip",
]

"""Called after each committed batch with (rows examined so far, rows selected in all)."""


@dataclass(frozen=True, slots=True)
class Selection:
    """Which dead deliveries: every given condition must hold (none given: all of them).

    ``since`` (inclusive) and ``until`` (exclusive) bound ``finished_at``, when it died.
    ``tenant``: only deliveries of that tenant's events (None: every tenant). A malformed
    tenant id or event type raises :class:`~outbox.errors.InvalidEvent` here, before any SQL.
    """

    ids: tuple[int, ...] = ()
    endpoint_id: uuid.UUID | None = None
    event_type: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        check_tenant(self.tenant)
        if self.event_type is not None:
            check_type(self.event_type)  # the grammar emit enforces: no NUL, no surrogate

    def params(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids) or None, "endpoint": self.endpoint_id,
            "event_type": self.event_type, "since": self.since, "until": self.until,
            "tenant": self.tenant,
        }


@dataclass(frozen=True, slots=True)
class DeadDelivery:
    """One row of :func:`list_dead`."""

    id: int
    event_id: uuid.UUID
    event_type: str | None
    endpoint_id: uuid.UUID
    url: str | None
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a delivery: a ``delivery_attempts`` row, or a first-try success kept on
    its delivery row (``delivery_attempt_log``, migrations/0019_wal.sql)."""

    attempt: int
    outcome: str
    status_code: int | None
    duration_ms: float | None
    error_class: str | None
    error: str | None
    response_excerpt: str | None
    worker: str | None
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class DeliveryDetail:
    """A delivery with its event and its whole attempt log (oldest first)."""

    id: int
    event_id: uuid.UUID
    endpoint_id: uuid.UUID
    state: str
    attempts: int
    visible_at: dt.datetime
    leased: bool
    last_status: int | None
    last_error: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None
    event_type: str | None
    payload: str | None
    event_key: str | None
    emitted_at: dt.datetime | None
    endpoint_url: str | None
    endpoint_enabled: bool
    blocking: bool  # a dead head of an ordered endpoint's key: its key waits for it
    held_back: int  # deliveries of its key queued behind it (ordered endpoints; else 0)
    log: list[Attempt] = field(default_factory=list)


def parse_delivery_id(value: str | int) -> int:
    """``value`` as a delivery id, or :class:`DeliveryNotFound` naming what was given."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DeliveryNotFound(f"no delivery {value!r} (ids are positive integers)") from None
    if number <= 0 or number >= 2**63:
        raise DeliveryNotFound(f"no delivery {value}")
    return number


@dataclass(frozen=True, slots=True)
class DeadCursor:
    """Where a page of :func:`list_dead` stopped: its last row's (finished_at, id). As text
    (``str``, :meth:`parse`) it is ``<ISO 8601 finished_at>|<id>``, opaque to clients."""

    finished_at: dt.datetime
    id: int

    def __str__(self) -> str:  # UTC with a Z: nothing a query string must escape
        at = self.finished_at.astimezone(dt.UTC)
        return f"{at:%Y-%m-%dT%H:%M:%S.%f}Z|{self.id}"

    @classmethod
    def parse(cls, text: str) -> DeadCursor:
        """The cursor ``text`` names, or ``ValueError`` (garbage, a naive time, a bad id)."""
        at, sep, number = text.partition("|")
        try:
            when = dt.datetime.fromisoformat(at) if sep and len(text) <= 80 else None
            ident = int(number) if number.isdigit() else 0
        except ValueError:
            when = None
        if when is None or when.tzinfo is None or not 0 < ident < 2**63:
            raise ValueError(f"cursor {text[:80]!r} is not one this API returned")
        return cls(when, ident)


@dataclass(frozen=True, slots=True)
class DeadPage:
    """Dead deliveries, most recently dead first; ``next_cursor``: pass it back for the
    next page (None: this one is the last)."""

    rows: list[DeadDelivery]
    next_cursor: DeadCursor | None


def list_dead(conn: psycopg.Connection[Any], *, schema: str, selection: Selection,
              limit: int = 50, after: DeadCursor | None = None,
              endpoints: Sequence[uuid.UUID] | None = None) -> DeadPage:
    """The rows :func:`outbox.admin.deadletter.list_dead` lists, in its order, a page at a time:
    at most ``limit`` rows after the cursor ``after``. Keyset on (finished_at, id), so
    every dead row is reached exactly once however many share a finished_at (a batch
    dies with one ``now()``), and a page costs its rows, not its depth.

    A selection by ``tenant`` alone runs once per endpoint that can carry that tenant's
    events (its own and the all-tenants ones) on the per-endpoint dead index: the unsplit
    statement walks every dead row of every tenant to find a small tenant's (measured in
    bench/web.py: ~500 ms for 1 tenant in 1,000 at 50,000 dead). ``endpoints`` (the
    portal: a tenant's own endpoints) keeps only rows to those endpoints, the same way."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1-{MAX_PAGE}, got {limit}")
    carriers = list(endpoints) if endpoints is not None else None
    if carriers is None and selection.tenant is not None and selection.endpoint_id is None \
            and not selection.ids:
        carriers = _carriers(conn, schema, selection.tenant)
    if carriers is None:
        rows = _dead_page(conn, schema, selection, after, limit + 1)
    else:
        rows = [row for eid in carriers for row in _dead_page(
            conn, schema, replace(selection, endpoint_id=eid), after, limit + 1)]
        rows.sort(key=lambda r: (r.finished_at is not None, r.finished_at, r.id),
                  reverse=True)
    page = rows[:limit]
    if len(rows) <= limit or page[-1].finished_at is None:
        return DeadPage(page, None)
    return DeadPage(page, DeadCursor(page[-1].finished_at, page[-1].id))


def each_dead(conn: psycopg.Connection[Any], *, schema: str, selection: Selection,
              limit: int | None = None) -> Iterator[DeadDelivery]:
    """The rows :func:`list_dead` pages through, in its order, up to ``limit`` (None: all),
    one page (at most ``MAX_PAGE`` rows) read at a time. Read-only."""
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    after: DeadCursor | None = None
    left = limit
    while left is None or left > 0:
        size = MAX_PAGE if left is None else min(left, MAX_PAGE)
        page = list_dead(conn, schema=schema, selection=selection, limit=size, after=after)
        yield from page.rows
        if left is not None:
            left -= len(page.rows)
        if page.next_cursor is None:
            return
        after = page.next_cursor


def _carriers(conn: psycopg.Connection[Any], schema: str, tenant: str) -> list[uuid.UUID]:
    """The endpoints that can carry ``tenant``'s events: its own and the all-tenants ones."""
    found = [e.id for e in ep.list_all(conn, schema=schema, tenant=tenant)]
    with translated(), conn.cursor() as cur:
        cur.execute(render(queries.ALL_TENANT_ENDPOINTS, schema))
        return found + [uuid.UUID(str(r[0])) for r in cur.fetchall()]


def _dead_page(conn: psycopg.Connection[Any], schema: str, selection: Selection,
               after: DeadCursor | None, limit: int) -> list[DeadDelivery]:
    params = {**selection.params(), "limit": limit, "at": after and after.finished_at,
              "after_id": after and after.id}
    with translated(), conn.cursor(row_factory=class_row(DeadDelivery)) as cur:
        cur.execute(render(queries.DEAD_PAGE, schema), params, prepare=False)
        return cur.fetchall()


def show(conn: psycopg.Connection[Any], delivery_id: str | int, *, schema: str) -> DeliveryDetail:
    """One delivery (any state), its event and its attempt log; read-only."""
    did = parse_delivery_id(delivery_id)
    with translated():
        with conn.cursor(row_factory=class_row(DeliveryDetail)) as cur:
            cur.execute(render(queries.DELIVERY_GET, schema), (did,))
            detail = cur.fetchone()
        if detail is None:
            raise DeliveryNotFound(f"no delivery {did}")
        with conn.cursor(row_factory=class_row(Attempt)) as attempts:
            attempts.execute(render(queries.DELIVERY_ATTEMPTS, schema), (did,))
            return replace(detail, log=attempts.fetchall())


@dataclass(frozen=True, slots=True)
class _SkipCheck:
    id: int
    state: str
    holds_key: bool
    tenant: str | None


@dataclass(frozen=True, slots=True)
class _Skipped:
    id: int
    state: str
    skipped: bool


@dataclass(frozen=True, slots=True)
class SkipResult:
    """``skipped``: dead heads that released their key now; ``unchanged``: ids that held no
    key when their turn came (skipped before, or never ordered): nothing done."""

    skipped: list[int]
    unchanged: list[int]


def skip(conn: psycopg.Connection[Any], ids: Sequence[int | str], *, schema: str,
         tenant: str | None = None, actor: str = "outbox dead skip") -> SkipResult:
    """Release the keys held by these dead deliveries of ordered endpoints, without them.

    Each one stays dead (a later replay sends it unordered: its key is gone) and its
    attempt log records the skip (attempt 0, outcome ``skipped``, by ``actor``); the next
    delivery of its key becomes due in the same transaction, so the key goes on in order
    without it. Idempotent: an id that no longer holds a key is left alone and reported in
    ``unchanged``; safe beside workers and replays (rows are locked and re-checked).

    Refusals change nothing: an unknown id, or one of another tenant's events under
    ``tenant``, raises :class:`DeliveryNotFound`; a delivery that is not dead raises
    :class:`OperationRefused`. Runs in the caller's transaction if one is open (it must be
    READ COMMITTED: another level raises :class:`OperationRefused`), else in its own, READ
    COMMITTED whatever the connection's default.
    """
    check_tenant(tenant)
    wanted = sorted({parse_delivery_id(i) for i in ids})
    if not wanted:
        raise DeliveryNotFound("no delivery id given")
    own = conn.info.transaction_status == TransactionStatus.IDLE
    with translated(), conn.transaction(), conn.cursor(row_factory=class_row(_SkipCheck)) as cur:
        _read_committed(conn, own)
        cur.execute(render(queries.DEAD_SKIP_CHECK, schema), (wanted,))
        found = {r.id: r for r in cur.fetchall() if tenant is None or r.tenant == tenant}
        missing = [i for i in wanted if i not in found]
        if missing:
            scope = f" of tenant {tenant!r}" if tenant is not None else ""
            raise DeliveryNotFound(f"no delivery {', '.join(map(str, missing))}{scope}")
        alive = [i for i in wanted if found[i].state != "dead"]
        if alive:
            raise OperationRefused(
                f"not dead: {', '.join(f'{i} ({found[i].state})' for i in alive)}; only a"
                " dead delivery can be skipped")
        with conn.cursor(row_factory=class_row(_Skipped)) as done:
            done.execute(render(queries.DEAD_SKIP, schema), {"ids": wanted, "actor": actor})
            rows = done.fetchall()
    return SkipResult([r.id for r in rows if r.skipped], [r.id for r in rows if not r.skipped])


def _read_committed(conn: psycopg.Connection[Any], own: bool) -> None:
    """Make skip's transaction READ COMMITTED (``own``: it is skip's own, just begun), or
    refuse the caller's if it is not: the key's next delivery is promoted under the key's
    lock on a snapshot taken after it (migrations/0005_ordered.sql), which an older
    REPEATABLE READ or SERIALIZABLE snapshot would not see."""
    if own:
        conn.execute(queries.READ_COMMITTED)
        return
    level = conn.execute(queries.TRANSACTION_ISOLATION).fetchone()
    if level is None or level[0] != "read committed":
        raise OperationRefused(
            f"dead skip must run in a READ COMMITTED transaction, not {level and level[0]}:"
            " commit or roll back first (skip then runs in its own), or begin one with"
            " ISOLATION LEVEL READ COMMITTED")
