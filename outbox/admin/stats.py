"""Queue statistics per endpoint, for people (``outbox stats``) and for alerts.

Both functions are read-only single statements and cheap enough to run every few
seconds: they read the partial indexes, not the delivery history.

- :func:`due_summary` reads only ``deliveries_due`` (``(visible_at) WHERE state =
  'pending'``), whose size follows the backlog: use it for alerts and autoscaling
  ("oldest due delivery is more than 5 minutes late").
- :func:`by_endpoint` adds the last hour's finished rows (a ``finished_at`` range on
  ``deliveries_finished``) and one ``deliveries_dead`` probe per endpoint; its cost
  follows the backlog plus one hour of throughput.
- :func:`top_tenants` groups the due rows by their event's tenant (one primary-key probe
  of ``events`` per due row): its cost follows the due backlog, never the history.
- :func:`snapshot` is all three, for ``outbox stats``.

Every function takes ``tenant``: only deliveries of that tenant's *events* count (a
delivery belongs to its event's tenant, whichever endpoint carries it), and
:func:`by_endpoint` lists that tenant's endpoints plus the all-tenants ones. A malformed
tenant id raises :class:`~outbox.errors.InvalidEvent` before any SQL. With ``tenant``,
:func:`by_endpoint` drops the rows of other tenants' endpoints by their endpoint id before
it looks up any event's tenant, so another tenant's traffic costs no probe of ``events``
(tests/integration/test_tenant_scoped_plans.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import check_tenant

__all__ = [
    "DueSummary",
    "EndpointStats",
    "Snapshot",
    "TenantBacklog",
    "by_endpoint",
    "due_summary",
    "snapshot",
    "top_tenants",
]


@dataclass(frozen=True, slots=True)
class EndpointStats:
    """One endpoint's queue.

    ``pending``: not yet delivered or dead (including parked rows of a disabled endpoint);
    ``due``: pending and claimable now; ``in_flight``: pending and leased by a worker whose
    lease still runs; ``waiting``: deliveries of an ordered endpoint queued behind their
    key's head (not claimable until it is delivered or skipped); ``blocked``: those of
    them whose key is held by a dead head, in ``blocked_keys`` keys (they wait until the
    head is replayed and delivered, or skipped: ``outbox dead skip``);
    ``delivered_1h`` / ``dead_1h``: finished in the last hour;
    ``oldest_due_seconds``: how long the oldest due delivery has waited to be claimed
    (None: nothing due); ``last_error``: the error of the pending delivery that has failed
    most, else of the most recently dead one.
    """

    endpoint_id: uuid.UUID
    url: str
    enabled: bool
    pending: int
    due: int
    in_flight: int
    waiting: int
    blocked: int
    blocked_keys: int
    delivered_1h: int
    dead_1h: int
    oldest_due_seconds: float | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class DueSummary:
    """Deliveries claimable now, and the wait of the oldest (None: nothing due)."""

    due: int
    oldest_due_seconds: float | None


@dataclass(frozen=True, slots=True)
class TenantBacklog:
    """One tenant's due deliveries (``tenant`` None: tenant-less events) and the wait of
    its oldest."""

    tenant: str | None
    due: int
    oldest_due_seconds: float | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What ``outbox stats`` shows: per endpoint, the due total, the top tenants."""

    endpoints: list[EndpointStats]
    due: DueSummary
    tenants: list[TenantBacklog]


def by_endpoint(conn: psycopg.Connection[Any], *, schema: str, tenant: str | None = None
                ) -> list[EndpointStats]:
    """Every endpoint's figures, oldest endpoint first (see the module doc for cost and
    ``tenant``)."""
    check_tenant(tenant)
    with translated(), conn.cursor(row_factory=class_row(EndpointStats)) as cur:
        cur.execute(render(queries.STATS_BY_ENDPOINT, schema), {"tenant": tenant},
                    prepare=False)
        return cur.fetchall()


def due_summary(conn: psycopg.Connection[Any], *, schema: str, tenant: str | None = None
                ) -> DueSummary:
    """Due count and oldest due age from the ``deliveries_due`` index (with ``tenant``,
    plus one probe of the event per due row)."""
    check_tenant(tenant)
    with translated(), conn.cursor(row_factory=class_row(DueSummary)) as cur:
        cur.execute(render(queries.STATS_DUE, schema), {"tenant": tenant}, prepare=False)
        summary = cur.fetchone()
    assert summary is not None
    return summary


def top_tenants(conn: psycopg.Connection[Any], *, schema: str, tenant: str | None = None,
                limit: int = 10) -> list[TenantBacklog]:
    """The ``limit`` tenants with the most due deliveries, most first (ties: the longest
    wait first); with ``tenant``, that tenant's row alone (none if nothing is due)."""
    check_tenant(tenant)
    if limit < 1:
        raise ValueError("limit must be at least 1")
    with translated(), conn.cursor(row_factory=class_row(TenantBacklog)) as cur:
        cur.execute(render(queries.STATS_TOP_TENANTS, schema),
                    {"tenant": tenant, "limit": limit}, prepare=False)
        return cur.fetchall()


def snapshot(conn: psycopg.Connection[Any], *, schema: str, tenant: str | None = None,
             top: int = 10) -> Snapshot:
    """:func:`by_endpoint`, :func:`due_summary` and :func:`top_tenants` (``top`` rows)
    in one read-only call; a bad ``tenant`` raises before any SQL."""
    check_tenant(tenant)
    return Snapshot(by_endpoint(conn, schema=schema, tenant=tenant),
                    due_summary(conn, schema=schema, tenant=tenant),
                    top_tenants(conn, schema=schema, tenant=tenant, limit=top))
