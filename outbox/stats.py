"""Queue statistics per endpoint, for people (``outbox stats``) and for alerts.

Both functions are read-only single statements and cheap enough to run every few
seconds: they read the partial indexes, not the delivery history.

- :func:`due_summary` reads only ``deliveries_due`` (``(visible_at) WHERE state =
  'pending'``), whose size follows the backlog: use it for alerts and autoscaling
  ("oldest due delivery is more than 5 minutes late").
- :func:`by_endpoint` adds the last hour's finished rows (a ``finished_at`` range on
  ``deliveries_finished``) and one ``deliveries_dead`` probe per endpoint; its cost
  follows the backlog plus one hour of throughput.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox import queries
from outbox.db import render, translated


@dataclass(frozen=True, slots=True)
class EndpointStats:
    """One endpoint's queue.

    ``pending``: not yet delivered or dead (including parked rows of a disabled endpoint);
    ``due``: pending and claimable now; ``in_flight``: pending and leased by a worker whose
    lease still runs; ``delivered_1h`` / ``dead_1h``: finished in the last hour;
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
    delivered_1h: int
    dead_1h: int
    oldest_due_seconds: float | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class DueSummary:
    """Deliveries claimable now, and the wait of the oldest (None: nothing due)."""

    due: int
    oldest_due_seconds: float | None


def by_endpoint(conn: psycopg.Connection[Any], *, schema: str) -> list[EndpointStats]:
    """Every endpoint's figures, oldest endpoint first (see the module doc for cost)."""
    with translated(), conn.cursor(row_factory=class_row(EndpointStats)) as cur:
        cur.execute(render(queries.STATS_BY_ENDPOINT, schema))
        return cur.fetchall()


def due_summary(conn: psycopg.Connection[Any], *, schema: str) -> DueSummary:
    """Due count and oldest due age from the ``deliveries_due`` index alone."""
    with translated(), conn.cursor(row_factory=class_row(DueSummary)) as cur:
        cur.execute(render(queries.STATS_DUE, schema))
        summary = cur.fetchone()
    assert summary is not None
    return summary
