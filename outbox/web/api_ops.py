"""``/api/events``, ``/api/dead``, ``/api/stats``: the operator's read and replay routes,
over :mod:`outbox.admin.events`, :mod:`outbox.admin.deadletter` and :mod:`outbox.admin.stats` (the
functions ``outbox dead``, ``outbox replay`` and ``outbox stats`` call)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from outbox.admin import deadletter as dl
from outbox.admin import events as ev
from outbox.admin import replay as rp
from outbox.admin import stats as st
from outbox.admin.portal import mint_link
from outbox.web.deps import (
    AppSettings,
    Conn,
    duration,
    listing,
    plain,
    time_range,
    uuid_param,
)
from outbox.web.errors import ApiError
from outbox.web.models import PortalLinkIn, ReplayIn, SkipIn

router = APIRouter()
Limit = Query(50, ge=1, le=ev.MAX_PAGE)


@router.get("/events", tags=["events"])
def list_events(conn: Conn, settings: AppSettings, type: str | None = None,
                tenant: str | None = None, since: str | None = None, until: str | None = None,
                before: str | None = None, limit: int = Limit) -> JSONResponse:
    """Events newest first, by ``type``, ``tenant`` and emit time ``[since, until)`` (a
    time ago such as ``2h``, or ISO 8601). Pages: pass ``next_before`` of an answer as
    ``before`` to get the next (older) page."""
    low, high = time_range(since, until)
    page = ev.list_events(conn, schema=settings.schema_name, event_type=type, tenant=tenant,
                          since=low, until=high, before=uuid_param("before", before),
                          limit=limit)
    return listing({"events": plain(page.events), "next_before": plain(page.next_before)})


@router.get("/events/{event_id}", tags=["events"])
def get_event(event_id: str, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """One event, its payload, its deliveries and every attempt of each."""
    return {"event": plain(ev.get_event(conn, event_id, schema=settings.schema_name))}


def selection(*, ids: tuple[int, ...] = (), endpoint: str | None = None,
              event_type: str | None = None, since: str | None = None,
              until: str | None = None, tenant: str | None = None) -> dl.Selection:
    """The library selection from API parameters; 422 for a malformed one."""
    low, high = time_range(since, until)
    for i in ids:
        if not 0 < i < 2**63:
            raise ApiError(422, "invalid_parameter", f"ids: {i} is not a delivery id")
    return dl.Selection(ids=ids, endpoint_id=uuid_param("endpoint", endpoint),
                        event_type=event_type, since=low, until=high, tenant=tenant)


@router.get("/dead", tags=["dead letters"])
def list_dead(conn: Conn, settings: AppSettings, endpoint: str | None = None,
              event_type: str | None = None, since: str | None = None,
              until: str | None = None, tenant: str | None = None,
              cursor: str | None = None, limit: int = Limit) -> JSONResponse:
    """Dead deliveries, most recently dead first (the selectors of ``outbox dead list``).
    Pages: pass ``next_cursor`` of an answer as ``cursor`` (same selectors) to get the
    next page; every dead row comes exactly once. ``next_cursor`` null: the last page."""
    sel = selection(endpoint=endpoint, event_type=event_type, since=since, until=until,
                    tenant=tenant)
    page = dl.list_dead(conn, schema=settings.schema_name, selection=sel, limit=limit,
                        after=dead_cursor(cursor))
    return listing({"dead": plain(page.rows), "next_cursor": _text(page.next_cursor)})


def dead_cursor(value: str | None) -> dl.DeadCursor | None:
    """A ``cursor`` parameter, else 400 ``invalid_cursor``."""
    if value is None:
        return None
    try:
        return dl.DeadCursor.parse(value)
    except ValueError as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None


def _text(value: object | None) -> str | None:
    return None if value is None else str(value)


@router.post("/dead/replay", tags=["dead letters"])
def replay(body: ReplayIn, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """Re-queue dead deliveries (``outbox replay``). Without ``"confirm": true`` this is
    the dry run: the plan, per endpoint, and nothing changed; then send the same body
    with ``confirm``. Dead rows of a disabled endpoint: 409 unless ``enable_endpoints``."""
    filtered = bool(body.ids or body.endpoint or body.event_type or body.since or body.until)
    if body.all == filtered:
        raise ApiError(422, "invalid_selection",
                       "give ids, endpoint, event_type or since/until, or all (not both)")
    sel = selection(ids=tuple(body.ids), endpoint=body.endpoint, event_type=body.event_type,
                    since=body.since, until=body.until, tenant=body.tenant)
    return run_replay(conn, settings.schema_name, sel, body.confirm, body.enable_endpoints,
                      "replay by the HTTP API")


def run_replay(conn: Any, schema: str, sel: dl.Selection, confirm: bool, enable: bool,
               actor: str) -> dict[str, Any]:
    """The dry run (plan, refusal) or the replay itself; shared with the portal."""
    plan = rp.plan_replay(conn, schema=schema, selection=sel)
    refusal = rp.refusal(plan)
    answer: dict[str, Any] = {"dry_run": not confirm, "total": plan.total,
                              "endpoints": plain(plan.endpoints), "refusal": refusal}
    if not confirm:
        return answer
    result = rp.replay(conn, schema=schema, selection=sel, enable_endpoints=enable,
                       actor=actor)
    return {**answer, "result": plain(result)}


@router.post("/dead/skip", tags=["dead letters"])
def skip(body: SkipIn, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """Give up on dead deliveries that hold their ordering key (``outbox dead skip``): each
    stays dead, and its key's next delivery goes out now. ``unchanged``: ids that held no
    key. Unknown ids 404, ids not dead 409, nothing changed."""
    for i in body.ids:
        if not 0 < i < 2**63:
            raise ApiError(422, "invalid_parameter", f"ids: {i} is not a delivery id")
    result = dl.skip(conn, body.ids, schema=settings.schema_name, tenant=body.tenant,
                     actor="skip by the HTTP API")
    return {"skipped": result.skipped, "unchanged": result.unchanged}


@router.get("/stats", tags=["stats"])
def stats(conn: Conn, settings: AppSettings, tenant: str | None = None) -> JSONResponse:
    """Backlog (due now, oldest due age), per endpoint its queue, success rate over the
    last hour and breaker state, and the top tenants by due backlog."""
    schema = settings.schema_name
    health = ev.endpoint_health(conn, schema=schema, tenant=tenant)
    return listing({
        "due": plain(st.due_summary(conn, schema=schema, tenant=tenant)),
        "endpoints": [{**plain(h.stats), "success_rate_1h": h.success_rate_1h,
                       "breaker": h.breaker} for h in health],
        "tenants": plain(st.top_tenants(conn, schema=schema, tenant=tenant)),
    })


@router.post("/portal-links", tags=["portal"], status_code=201)
def portal_link(body: PortalLinkIn, request: Request, response: Response,
                settings: AppSettings) -> dict[str, Any]:
    """A signed link that opens ``tenant``'s portal until it expires (as ``outbox
    portal-link``); nothing is written."""
    base = body.base_url or settings.public_url
    if not base:  # never the request's Host header: a client could choose where links point
        raise ApiError(422, "invalid_parameter",
                       "base_url: required unless OUTBOX_PUBLIC_URL is set")
    link = mint_link(body.tenant, settings=settings, expires=duration("expires", body.expires),
                     base_url=base)
    response.headers["Cache-Control"] = "no-store"
    return {"url": link.url, "tenant": link.tenant, "expires_at": link.expires_at.isoformat()}
