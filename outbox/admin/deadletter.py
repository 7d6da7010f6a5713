"""Dead letters: list and inspect dead deliveries, and replay them.

A replay puts a dead delivery back in the queue: state ``pending``, ``attempts`` 0 (a
fresh retry budget), due now, no lease, no ``finished_at``. It is the same row, so the
same event and the same ``webhook-id``: receivers that deduplicate see a retry, not a new
event. Guarantees of :func:`replay`:

- **No duplicates.** There is one row per (event, endpoint); a batch updates only rows
  that are still ``dead`` when it locks them. Replaying the same rows twice, two replays
  at once, or a replay while a worker delivers an already replayed row never makes a
  second pending copy and never touches a pending (possibly leased) row.
- **Short transactions.** Rows go in batches of ``batch_size`` ids, keyset-paginated by
  id, each batch its own transaction; nothing is held between batches. An interrupted
  replay leaves whole batches replayed and the rest dead: running it again finishes it.
- **Audited.** Each replayed row gets a ``delivery_attempts`` entry (attempt 0, outcome
  ``replayed``, by ``actor``) recording what it had died of.
- **Refusals change nothing.** Unknown ids raise :class:`DeliveryNotFound`; dead rows of a
  disabled endpoint raise :class:`OperationRefused` unless ``enable_endpoints``.
- **Ordered endpoints.** A dead delivery that still holds its key blocks the key: the
  key's later deliveries wait. Replaying it puts it back at the head of its key, so the
  key resumes in order; :func:`skip` releases the key without it instead.
- **Tenant scoping.** A :class:`Selection` with ``tenant`` picks only deliveries of that
  tenant's *events* (whichever endpoint, an all-tenants one included), in the listing, the
  plan and inside every batch of the replay: another tenant's rows are never read into a
  batch, locked or changed.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, scalar_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._db.queries import operations as opq
from outbox._emit.event import check_tenant, check_type
from outbox.admin import endpoints as ep
from outbox.errors import DeliveryNotFound, OperationRefused

Progress = Callable[[int, int], None]
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
    """One ``delivery_attempts`` row."""

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


@dataclass(frozen=True, slots=True)
class EndpointShare:
    """Selected dead deliveries of one endpoint."""

    endpoint_id: uuid.UUID
    url: str | None
    enabled: bool
    disabled_reason: str | None
    count: int


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What :func:`replay` would touch now, per endpoint (largest first)."""

    endpoints: list[EndpointShare]

    @property
    def total(self) -> int:
        return sum(e.count for e in self.endpoints)

    @property
    def disabled(self) -> list[EndpointShare]:
        return [e for e in self.endpoints if not e.enabled]


@dataclass(frozen=True, slots=True)
class _Batch:
    """What one REPLAY_BATCH statement did: its last id (0: none), picked and replayed."""

    last_id: int
    picked: int
    replayed: int


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """``replayed`` rows went back to pending; ``skipped`` were selected but no longer
    dead when their batch ran (replayed or pruned meanwhile)."""

    replayed: int
    skipped: int
    batches: int
    enabled_endpoints: list[uuid.UUID]


def parse_delivery_id(value: str | int) -> int:
    """``value`` as a delivery id, or :class:`DeliveryNotFound` naming what was given."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DeliveryNotFound(f"no delivery {value!r} (ids are positive integers)") from None
    if number <= 0 or number >= 2**63:
        raise DeliveryNotFound(f"no delivery {value}")
    return number


def list_dead(
    conn: psycopg.Connection[Any], *, schema: str, selection: Selection = Selection(),
    limit: int | None = 100,
) -> list[DeadDelivery]:
    """Dead deliveries matching ``selection``, most recently dead first (``limit`` None:
    all). Read-only."""
    if limit is not None and limit < 0:
        raise ValueError("limit must not be negative")
    params = {**selection.params(), "limit": limit}
    with translated(), conn.cursor(row_factory=class_row(DeadDelivery)) as cur:
        cur.execute(render(queries.DEAD_LIST, schema), params, prepare=False)
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


def plan_replay(
    conn: psycopg.Connection[Any], *, schema: str, selection: Selection
) -> ReplayPlan:
    """The dead deliveries ``selection`` picks now, per endpoint; read-only.

    Raises :class:`DeliveryNotFound` for an id in ``selection.ids`` that does not exist
    (ids that exist but are not dead are simply not selected).
    """
    if selection.ids:
        with translated(), conn.cursor(row_factory=scalar_row) as ids:  # first column: id
            ids.execute(render(queries.DELIVERY_STATES, schema), (list(selection.ids),))
            missing = sorted(set(selection.ids) - set(ids.fetchall()))
        if missing:
            raise DeliveryNotFound("no delivery " + ", ".join(map(str, missing)))
    # a tenant alone: per endpoint that can carry its events, not every tenant's dead rows
    summary = (opq.DEAD_SUMMARY_TENANT if selection.tenant is not None and not selection.ids
               else queries.DEAD_SUMMARY)
    with translated(), conn.cursor(row_factory=class_row(EndpointShare)) as shares:
        shares.execute(render(summary, schema), selection.params(), prepare=False)
        return ReplayPlan(shares.fetchall())


def refusal(plan: ReplayPlan) -> str | None:
    """Why ``plan`` may not run without enabling endpoints, or None."""
    if not plan.disabled:
        return None
    names = "; ".join(
        f"{e.endpoint_id} ({e.url}, {e.count} dead, disabled: {e.disabled_reason or '?'})"
        for e in plan.disabled
    )
    return (f"refusing to replay onto disabled endpoint(s): {names}. Fix the receiver, then "
            "run `outbox endpoints enable ID` or pass --enable-endpoint")


def _check_enable_scope(conn: psycopg.Connection[Any], schema: str, tenant: str | None,
                        disabled: list[EndpointShare]) -> None:
    """Under a tenant scope, enabling an endpoint is allowed only for that tenant's own:
    enabling a shared (all-tenants) endpoint would make every tenant's parked rows due."""
    if tenant is None:
        return
    for share in disabled:
        owner = ep.get(conn, share.endpoint_id, schema=schema)
        if owner.tenant != tenant:
            whose = "every tenant's" if owner.all_tenants else f"tenant {owner.tenant!r}'s"
            raise OperationRefused(
                f"endpoint {owner.id} is disabled and receives {whose} events: enabling it"
                f" under --tenant {tenant} would release other tenants' deliveries; enable it"
                " with `outbox endpoints enable ID` (or replay without --tenant)")


def replay(
    conn: psycopg.Connection[Any],
    *,
    schema: str,
    selection: Selection,
    batch_size: int = 1000,
    enable_endpoints: bool = False,
    actor: str = "outbox replay",
    progress: Progress | None = None,
) -> ReplayResult:
    """Re-queue the selected dead deliveries (see the module's guarantees).

    ``conn`` must not be inside a transaction: each batch commits on its own. With
    ``enable_endpoints``, disabled endpoints among the selection are enabled first.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise OperationRefused("replay commits batch by batch: run it outside a transaction")
    plan = plan_replay(conn, schema=schema, selection=selection)
    reason = refusal(plan)
    if reason and not enable_endpoints:
        raise OperationRefused(reason)
    if enable_endpoints:
        _check_enable_scope(conn, schema, selection.tenant, plan.disabled)
    enabled = []
    for share in plan.disabled:
        with conn.transaction():
            enabled.append(ep.set_enabled(conn, share.endpoint_id, True, schema=schema).id)
    sql = render(queries.REPLAY_BATCH, schema)
    params = {**selection.params(), "limit": batch_size, "actor": actor, "after": 0}
    replayed = examined = batches = 0
    while True:
        with translated(), conn.transaction(), conn.cursor(row_factory=class_row(_Batch)) as cur:
            cur.execute(sql, params, prepare=False)
            batch = cur.fetchone()
        assert batch is not None
        if batch.picked == 0:
            break
        batches += 1
        replayed += batch.replayed
        examined += batch.picked
        params["after"] = batch.last_id
        if progress is not None:
            progress(examined, max(plan.total, examined))
    return ReplayResult(replayed, examined - replayed, batches, enabled)


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
        conn.execute(opq.READ_COMMITTED)
        return
    level = conn.execute(opq.TRANSACTION_ISOLATION).fetchone()
    if level is None or level[0] != "read committed":
        raise OperationRefused(
            f"dead skip must run in a READ COMMITTED transaction, not {level and level[0]}:"
            " commit or roll back first (skip then runs in its own), or begin one with"
            " ISOLATION LEVEL READ COMMITTED")
