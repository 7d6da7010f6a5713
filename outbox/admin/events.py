"""The event log, read-only: lists of events, one event with its deliveries and every
attempt, and each endpoint's health. Shared by the HTTP API, the console and the portal.

Guarantees:

- **Read-only.** No function here writes or locks anything.
- **Cost follows the page.** :func:`list_events` is keyset-paginated on the UUIDv7 id,
  newest first (never OFFSET): each page walks an index from its cursor and reads
  ``limit`` events plus one index probe of ``deliveries`` per event.
- **Scopes.** ``tenant`` keeps events of that tenant; ``owner`` (the customer portal)
  keeps only events with a delivery to an endpoint that tenant owns, and only those
  deliveries: an all-tenants (internal) endpoint never shows, nor an event (type,
  payload) that only such an endpoint received. An event of another tenant (or only
  such an endpoint's) is :class:`EventNotFound`, exactly like one that does not exist.
- **Bad input raises before any SQL:** a malformed id is :class:`EventNotFound`, a bad
  tenant or event type :class:`~outbox.errors.InvalidEvent`, a bad range, limit or dead
  letter cursor ``ValueError``.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import check_tenant, check_type
from outbox.admin import deadletter as dl
from outbox.admin import endpoints as ep
from outbox.admin import stats as st
from outbox.admin._paging import MAX_PAGE
from outbox.errors import OutboxError

__all__ = [
    "MAX_PAGE",
    "AttemptRow",
    "EndpointHealth",
    "EndpointPage",
    "EventDelivery",
    "EventDetail",
    "EventNotFound",
    "EventPage",
    "EventSummary",
    "endpoint_health",
    "get_event",
    "id_floor",
    "list_endpoints",
    "list_events",
    "owned_deliveries",
    "parse_event_id",
]


class EventNotFound(OutboxError):
    """No event with that id (or not one of the caller's tenant)."""


@dataclass(frozen=True, slots=True)
class EventSummary:
    """One row of :func:`list_events`: the event and how its deliveries stand."""

    id: uuid.UUID
    type: str
    tenant: str | None
    key: str | None
    created_at: dt.datetime
    delivered: int
    pending: int
    dead: int


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page, newest first; ``next_before`` is the cursor of the next (older) page, None
    when this one is the last."""

    events: list[EventSummary]
    next_before: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class AttemptRow(dl.Attempt):
    """One HTTP attempt (or a replay mark, attempt 0) of the delivery ``delivery_id``."""

    delivery_id: int


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """A delivery of the event, with its attempts oldest first. ``visible_at``: when a
    pending one may next be claimed; None while its endpoint is disabled (parked)."""

    id: int
    endpoint_id: uuid.UUID
    endpoint_url: str | None
    state: str
    attempts: int
    visible_at: dt.datetime | None
    leased: bool
    last_status: int | None
    last_error: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None
    log: list[AttemptRow] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EventDetail:
    """An event, its payload (exact JSON text) and its deliveries."""

    id: uuid.UUID
    type: str
    tenant: str | None
    key: str | None
    idempotency_key: str | None
    payload: str
    created_at: dt.datetime
    deliveries: list[EventDelivery] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    """:class:`~outbox.admin.stats.EndpointStats` plus ``success_rate_1h`` (delivered over
    delivered + dead in the last hour; None: nothing finished) and ``breaker``:
    ``disabled``; ``open`` when it has pending rows, none due, none in flight and a last
    error (a worker's breaker or the retry schedule holds them back: breakers live in
    the workers' memory, this is what the queue shows of them); else ``closed``."""

    stats: st.EndpointStats
    success_rate_1h: float | None
    breaker: str


@dataclass(frozen=True, slots=True)
class EndpointPage:
    """Endpoints oldest first; ``next_after`` is the cursor of the next page (None: last)."""

    endpoints: list[ep.Endpoint]
    next_after: uuid.UUID | None


def list_endpoints(conn: psycopg.Connection[Any], *, schema: str, tenant: str | None = None,
                   enabled: bool | None = None, after: uuid.UUID | None = None,
                   limit: int = 100) -> EndpointPage:
    """A page of endpoints (no secrets), oldest first, keyset on the id: of ``tenant``
    (its own, as ``outbox endpoints list --tenant``), enabled or not; at most ``limit``."""
    check_tenant(tenant)
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1-{MAX_PAGE}, got {limit}")
    params = {"tenant": tenant, "enabled": enabled, "after": after, "limit": limit + 1}
    with translated(), conn.cursor(row_factory=class_row(ep.Endpoint)) as cur:
        cur.execute(render(queries.ENDPOINT_PAGE, schema), params, prepare=False)
        rows = cur.fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return EndpointPage(rows, rows[-1].id if more else None)


def id_floor(when: dt.datetime) -> uuid.UUID:
    """The smallest UUIDv7 of ``when``'s millisecond: ``id >= id_floor(t)`` is "emitted at
    or after t" (by the emitting host's clock)."""
    if when.tzinfo is None:
        raise ValueError("time must be timezone-aware")
    millis = int(when.timestamp() * 1000)
    if not 0 <= millis < 2**48:
        raise ValueError(f"time {when.isoformat()} is out of range")
    return uuid.UUID(int=millis << 80)


def parse_event_id(value: str | uuid.UUID) -> uuid.UUID:
    """``value`` as a UUID, or :class:`EventNotFound` naming what was given."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        raise EventNotFound(f"no event {value!r} (ids look like a UUID)") from None


def list_events(
    conn: psycopg.Connection[Any], *, schema: str, event_type: str | None = None,
    tenant: str | None = None, since: dt.datetime | None = None,
    until: dt.datetime | None = None, before: uuid.UUID | None = None, limit: int = 50,
    owner: str | None = None,
) -> EventPage:
    """Events newest first: of ``event_type``, of ``tenant``, emitted in [since, until),
    older than the cursor ``before``; at most ``limit`` (1..500). ``owner``: see module."""
    check_tenant(tenant)
    check_tenant(owner)
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1-{MAX_PAGE}, got {limit}")
    if event_type is not None:
        check_type(event_type)  # emit's grammar: what no stored event matches is refused
    if since is not None and until is not None and since >= until:
        raise ValueError("since must be before until")
    params = {"type": event_type, "tenant": tenant, "owner": owner, "before": before,
              "low": id_floor(since) if since else None,
              "high": id_floor(until) if until else None, "limit": limit + 1}
    with translated(), conn.cursor(row_factory=class_row(EventSummary)) as cur:
        cur.execute(render(queries.EVENT_LIST, schema), params, prepare=False)
        rows = cur.fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return EventPage(rows, rows[-1].id if more else None)


def get_event(conn: psycopg.Connection[Any], event_id: str | uuid.UUID, *, schema: str,
              owner: str | None = None) -> EventDetail:
    """One event with its deliveries and their whole attempt logs; with ``owner``, only
    an event of that tenant that went to at least one of that tenant's own endpoints, and
    only those deliveries."""
    eid = parse_event_id(event_id)
    check_tenant(owner)
    with translated():
        with conn.cursor(row_factory=class_row(EventDetail)) as cur:
            cur.execute(render(queries.EVENT_GET, schema), {"id": eid, "owner": owner})
            event = cur.fetchone()
        if event is None:
            raise EventNotFound(f"no event {eid}")
        with conn.cursor(row_factory=class_row(EventDelivery)) as cur:
            cur.execute(render(queries.EVENT_DELIVERIES, schema), {"id": eid, "owner": owner})
            deliveries = cur.fetchall()
        with conn.cursor(row_factory=class_row(AttemptRow)) as cur:
            cur.execute(render(queries.ATTEMPTS_OF, schema), ([d.id for d in deliveries],))
            attempts = cur.fetchall()
    logs: dict[int, list[AttemptRow]] = {}
    for attempt in attempts:
        logs.setdefault(attempt.delivery_id, []).append(attempt)
    event.deliveries.extend(replace(d, log=logs.get(d.id, [])) for d in deliveries)
    return event


def owned_deliveries(conn: psycopg.Connection[Any], ids: list[int], *, schema: str,
                     owner: str) -> set[int]:
    """Which of ``ids`` are deliveries to an endpoint ``owner`` owns."""
    check_tenant(owner)
    with translated(), conn.cursor() as cur:
        cur.execute(render(queries.DELIVERIES_OWNED, schema), {"ids": ids, "owner": owner})
        return {int(r[0]) for r in cur.fetchall()}


def endpoint_health(conn: psycopg.Connection[Any], *, schema: str,
                    tenant: str | None = None) -> list[EndpointHealth]:
    """:func:`outbox.admin.stats.by_endpoint` (same cost and ``tenant`` scope) with each
    endpoint's success rate and breaker state (see :class:`EndpointHealth`)."""
    return [EndpointHealth(row, _rate(row), _breaker(row))
            for row in st.by_endpoint(conn, schema=schema, tenant=tenant)]


def _rate(row: st.EndpointStats) -> float | None:
    finished = row.delivered_1h + row.dead_1h
    return row.delivered_1h / finished if finished else None


def _breaker(row: st.EndpointStats) -> str:
    if not row.enabled:
        return "disabled"
    if row.pending and not row.due and not row.in_flight and row.last_error:
        return "open"
    return "closed"
