"""Replay of dead deliveries (plan, then replay), over the rows :mod:`outbox.admin.deadletter`
lists.

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
- **Reported.** A replay that re-queued anything ends with one ``outbox.replay.finished``
  operational event (docs/guides/operational-events.md) of the selection's tenant.
- **Ordered endpoints.** A dead delivery that still holds its key blocks the key: the
  key's later deliveries wait. Replaying it puts it back at the head of its key, so the
  key resumes in order; :func:`skip` releases the key without it instead.
- **Tenant scoping.** A :class:`Selection` with ``tenant`` picks only deliveries of that
  tenant's *events* (whichever endpoint, an all-tenants one included), in the listing, the
  plan and inside every batch of the replay: another tenant's rows are never read into a
  batch, locked or changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row, scalar_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox.admin import endpoints as ep
from outbox.admin.deadletter import Selection
from outbox.errors import DeliveryNotFound, OperationRefused

Progress = Callable[[int, int], None]  # (rows done, rows planned)

__all__ = ["EndpointShare", "ReplayPlan", "ReplayResult", "plan_replay", "refusal", "replay"]


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
    summary = (queries.DEAD_SUMMARY_TENANT if selection.tenant is not None and not selection.ids
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
    result = ReplayResult(replayed, examined - replayed, batches, enabled)
    if batches:
        _report(conn, schema, selection.tenant, actor, result)
    return result


def _report(conn: psycopg.Connection[Any], schema: str, tenant: str | None, actor: str,
            result: ReplayResult) -> None:
    """``outbox.replay.finished``, committed after the last batch (a replay interrupted
    before it reports nothing; running it again finishes it and reports)."""
    params = {"tenant": tenant, "replayed": result.replayed, "skipped": result.skipped,
              "batches": result.batches,
              "enabled": [str(e) for e in result.enabled_endpoints],
              "actor": actor}
    with translated(), conn.transaction():
        conn.execute(render(queries.OP_REPLAY_FINISHED, schema), params)


