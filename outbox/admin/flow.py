"""Per-endpoint flow control as operators see it: the allowed rate and whether the
endpoint is throttled (docs/guides/flow-control.md).

The settings (``rate_limit``, ``rate_burst``, ``tenant_rate_limit``) are endpoint fields
(:mod:`outbox.admin.endpoints`); the state is written by the workers' claims and throttling
(the ``endpoint_flow`` table). Read-only, one statement by primary key.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db.connection import render, translated
from outbox._db.queries import endpoints as queries
from outbox.admin import endpoints as ep
from outbox.errors import EndpointNotFound

__all__ = [
    "FlowState",
    "describe",
    "state",
    "states",
]


@dataclass(frozen=True, slots=True)
class FlowState:
    """``rate_limit``: the fixed limit in force (the lower of the operator's and the
    tenant's), None: none. ``allowed_rate``: requests per second every worker together
    may send now (the fixed limit, lowered while throttled), None: unlimited.
    ``throttled``: the endpoint answered 429/503 or timed out lately (its adaptive rate
    applies) or is paused by ``Retry-After`` until ``paused_until``. ``throttled_total``:
    rate cuts and pauses so far."""

    endpoint_id: uuid.UUID
    rate_limit: float | None
    allowed_rate: float | None
    throttled: bool
    paused_until: dt.datetime | None
    throttled_total: int


_ROW = class_row(FlowState)


def states(conn: psycopg.Connection[Any], endpoint_ids: Iterable[uuid.UUID], *,
           schema: str) -> dict[uuid.UUID, FlowState]:
    """The flow state of each given endpoint (unknown ids are left out)."""
    ids = list(endpoint_ids)
    if not ids:
        return {}
    with translated(), conn.cursor(row_factory=_ROW) as cur:
        cur.execute(render(queries.FLOW_STATES, schema), (ids,))
        return {s.endpoint_id: s for s in cur.fetchall()}


def state(conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID, *,
          schema: str) -> FlowState:
    """One endpoint's flow state, or :class:`~outbox.errors.EndpointNotFound`."""
    eid = ep.parse_id(endpoint_id)
    found = states(conn, [eid], schema=schema).get(eid)
    if found is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return found


def describe(s: FlowState) -> str:
    """``unlimited``, ``50/s`` or ``35/s (throttled; paused until 12:00:01Z)``."""
    text = "unlimited" if s.allowed_rate is None else f"{s.allowed_rate:.4g}/s"
    if s.throttled:
        until = s.paused_until.astimezone(dt.UTC) if s.paused_until else None
        paused = f"; paused until {until:%H:%M:%S}Z" if until else ""
        text += f" (throttled{paused})"
    return text
