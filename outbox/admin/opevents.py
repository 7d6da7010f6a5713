"""Operational events: the ``outbox.*`` events the sender emits about its own deliveries
and endpoints (docs/guides/operational-events.md), and the newest of them for the console.

They are written by the statement that makes the change they report (the worker's
completion, :func:`outbox.admin.endpoints.set_enabled`), so each commits with its change
or not at all, and delivered like any event to the endpoints whose filter names them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import check_tenant

__all__ = ["TYPES", "OperationalEvent", "recent"]

#: Every operational event type, in the order of the guide's table.
TYPES = (
    "outbox.delivery.dead",
    "outbox.endpoint.failing",
    "outbox.endpoint.recovered",
    "outbox.endpoint.disabled",
    "outbox.endpoint.enabled",
    "outbox.key.blocked",
    "outbox.replay.finished",
)


@dataclass(frozen=True, slots=True)
class OperationalEvent:
    """One operational event: its id (the ``webhook-id``), type, tenant (the endpoint's),
    when it was written, and its ``data``."""

    id: uuid.UUID
    type: str
    tenant: str | None
    created_at: dt.datetime
    data: dict[str, Any]


def recent(conn: psycopg.Connection[Any], *, schema: str, limit: int = 10,
           tenant: str | None = None) -> list[OperationalEvent]:
    """The newest ``limit`` (1..100) operational events, newest first; of ``tenant`` only
    if given. ValueError or InvalidEvent on bad input, before any SQL."""
    if not 1 <= limit <= 100:
        raise ValueError(f"limit must be 1-100, got {limit}")
    check_tenant(tenant)
    params = {"types": list(TYPES), "tenant": tenant, "limit": limit}
    with translated(), conn.cursor(row_factory=class_row(OperationalEvent)) as cur:
        cur.execute(render(queries.OP_RECENT, schema), params)
        return cur.fetchall()
