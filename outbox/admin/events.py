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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._db.queries.events import DEAD_PAGE
from outbox._emit.event import check_tenant, check_type
from outbox.admin import deadletter as dl
from outbox.admin import endpoints as ep
from outbox.admin import stats as st
from outbox.errors import OutboxError

MAX_PAGE = 500


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

    rows: list[dl.DeadDelivery]
    next_cursor: DeadCursor | None


def list_dead(conn: psycopg.Connection[Any], *, schema: str, selection: dl.Selection,
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


def _carriers(conn: psycopg.Connection[Any], schema: str, tenant: str) -> list[uuid.UUID]:
    """The endpoints that can carry ``tenant``'s events: its own and the all-tenants ones."""
    found = [e.id for e in ep.list_all(conn, schema=schema, tenant=tenant)]
    with translated(), conn.cursor() as cur:
        cur.execute(render(queries.ALL_TENANT_ENDPOINTS, schema))
        return found + [uuid.UUID(str(r[0])) for r in cur.fetchall()]


def _dead_page(conn: psycopg.Connection[Any], schema: str, selection: dl.Selection,
               after: DeadCursor | None, limit: int) -> list[dl.DeadDelivery]:
    params = {**selection.params(), "limit": limit, "at": after and after.finished_at,
              "after_id": after and after.id}
    with translated(), conn.cursor(row_factory=class_row(dl.DeadDelivery)) as cur:
        cur.execute(render(DEAD_PAGE, schema), params, prepare=False)
        return cur.fetchall()
