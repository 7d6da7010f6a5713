"""Operator console pages (server-rendered HTML) mounted at ``/``.

Every page needs the operator session (:func:`outbox.web.auth.require_operator`); without
it a page answers 303 to ``/login``. Every form POST carries the session's CSRF token
(:func:`outbox.web.auth.verify_csrf`). Data comes from the library functions the CLI and
the JSON API use: :mod:`outbox.admin.stats`, :mod:`outbox.admin.events`,
:mod:`outbox.admin.endpoints`,
:mod:`outbox.admin.deadletter`, :mod:`outbox.admin.activity`.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

import psycopg
from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from outbox.admin import activity, deadletter, flow, opevents, stats
from outbox.admin import deadletter as dl
from outbox.admin import endpoints as ep
from outbox.admin import events as ev
from outbox.admin import replay as rp
from outbox.web import auth
from outbox.web.auth import web_settings
from outbox.web.chart import NARROW, WIDE, backlog_chart, rate_chart
from outbox.web.deps import connection
from outbox.web.errors import NotAuthenticated
from outbox.web.pages import (
    BAD_INPUT,
    NOT_FOUND,
    REFUSED,
    STYLESHEET,
    duration,
    error_page,
    login_redirect,
    render,
    see_other,
)
from outbox.web.replay_pages import confirm_page, selection_from, selection_query

router = APIRouter()
Conn = Annotated[psycopg.Connection[Any], Depends(connection)]
NOTICES = {"enabled": "Endpoint enabled.", "disabled": "Endpoint disabled.",
           "replayed": "Replayed: the deliveries are back in the queue."}


def operator(request: Request) -> dict[str, Any]:
    """Dependency of every console page: the operator session (else 303 to /login) and
    the context every page's template needs."""
    try:
        auth.require_operator(request)
    except NotAuthenticated:
        raise login_redirect(request) from None
    return {"area": "console", "csrf": auth.csrf_token(request), "logout": True}


Page = Annotated[dict[str, Any], Depends(operator)]
Posted = Annotated[None, Depends(auth.verify_csrf)]


def _schema(request: Request) -> str:
    return web_settings(request).schema_name


@router.get("/static/outbox.css", include_in_schema=False)
def stylesheet() -> FileResponse:
    """The one stylesheet of the console and the portal (no CDN, no build step)."""
    return FileResponse(STYLESHEET, media_type="text/css",
                        headers={"Cache-Control": "public, max-age=3600"})


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def overview(request: Request, page: Page, conn: Conn) -> Response:
    """Due count, oldest due, backlog, dead letters, and the last hour as two charts."""
    schema = _schema(request)
    minutes = activity.last_hour(conn, schema=schema)
    per_endpoint = stats.by_endpoint(conn, schema=schema)
    attention = [(e, why) for e in per_endpoint if (why := _attention(e))]
    context = {
        **page, "page": "overview",
        "due": stats.due_summary(conn, schema=schema),
        "pending": sum(e.pending for e in per_endpoint),
        "dead_total": rp.plan_replay(conn, schema=schema,
                                             selection=deadletter.Selection()).total,
        "delivered_1h": sum(m.delivered for m in minutes),
        "rate": [rate_chart(minutes, WIDE), rate_chart(minutes, NARROW)],
        "backlog": [backlog_chart(minutes, WIDE), backlog_chart(minutes, NARROW)],
        "attention": attention,
        "operational": opevents.recent(conn, schema=schema, limit=10),
    }
    return render(request, "overview.html", context)


def _attention(figures: stats.EndpointStats) -> str:
    """Why an endpoint needs a look ("" if it does not)."""
    why = ["disabled"] if not figures.enabled else []
    if figures.dead_1h:
        why.append(f"{figures.dead_1h:,} dead in the last hour")
    if (figures.oldest_due_seconds or 0) > 60:
        why.append(f"oldest due waits {duration(figures.oldest_due_seconds)}")
    return "; ".join(why)


def _flag(value: str | None) -> bool | None:
    return {"true": True, "false": False}.get(value or "")


@router.get("/endpoints", response_class=HTMLResponse, include_in_schema=False)
def endpoints_page(request: Request, page: Page, conn: Conn, tenant: str | None = None,
                   enabled: str | None = None, done: str | None = None) -> Response:
    """Every endpoint with its health at a glance: success rate, breaker, backlog."""
    schema = _schema(request)
    tenant = tenant or None
    want = _flag(enabled)
    context = {**page, "page": "endpoints", "tenant": tenant, "enabled": want,
               "notice": NOTICES.get(done or "")}
    try:
        listed = ep.list_all(conn, schema=schema, tenant=tenant)
        health = {h.stats.endpoint_id: h
                  for h in ev.endpoint_health(conn, schema=schema, tenant=tenant)}
        flows = flow.states(conn, [e.id for e in listed], schema=schema)
    except BAD_INPUT as exc:
        return error_page(request, exc, {**context, "back": "/endpoints"})
    rows = [{**_endpoint_row(e, health.get(e.id)), "flow": flows.get(e.id)} for e in listed
            if want is None or e.enabled == want]
    return render(request, "endpoints.html", {**context, "rows": rows})


def _endpoint_row(endpoint: ep.Endpoint, health: ev.EndpointHealth | None) -> dict[str, Any]:
    rate = health.success_rate_1h if health else None
    breaker = health.breaker if health else ("closed" if endpoint.enabled else "disabled")
    if rate is None:
        kind = "bad" if breaker == "open" else "ok"
    else:
        kind = "ok" if rate >= 0.99 else "warn" if rate >= 0.9 else "bad"
    if breaker == "open":
        kind = "bad"
    figures = health.stats if health else None
    return {"endpoint": endpoint, "health": kind, "breaker": breaker,
            "success": "-" if rate is None else f"{rate:.1%}",
            "pending": figures.pending if figures else 0,
            "dead_1h": figures.dead_1h if figures else 0,
            "last_error": figures.last_error if figures else None}


@router.post("/endpoints/{endpoint_id}/{action}", include_in_schema=False)
def endpoint_switch(request: Request, endpoint_id: str, action: str, page: Page,
                    _: Posted, conn: Conn) -> Response:
    """Enable or disable one endpoint (the CLI's ``endpoints enable/disable``)."""
    if action not in ("enable", "disable"):
        raise HTTPException(status_code=404)
    try:
        ep.set_enabled(conn, endpoint_id, action == "enable", schema=_schema(request),
                       reason="disabled from the console")
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    return see_other(request, f"/endpoints?done={action}d")


@router.get("/dead", response_class=HTMLResponse, include_in_schema=False)
def dead_page(request: Request, page: Page, conn: Conn, done: str | None = None) -> Response:
    """Dead deliveries, most recently dead first, with the CLI's selectors."""
    context: dict[str, Any] = {
        **page, "page": "dead", "base": "/dead", "detail_base": "/deliveries",
        "show_endpoint_filter": True, "show_tenant_filter": True,
        "filters": dict(request.query_params), "notice": NOTICES.get(done or ""),
        "filtered": bool(selection_query(request.query_params)),
    }
    cursor = request.query_params.get("cursor")
    try:
        selection = selection_from(request.query_params)
        found = dl.list_dead(conn, schema=_schema(request), selection=selection, limit=100,
                             after=dl.DeadCursor.parse(cursor) if cursor else None)
    except BAD_INPUT + NOT_FOUND as exc:
        return render(request, "dead.html", {**context, "error": str(exc), "rows": []},
                      status_code=400)
    query = selection_query(request.query_params)
    older = found.next_cursor and urlencode({**query, "cursor": str(found.next_cursor)})
    return render(request, "dead.html", {
        **context, "rows": found.rows, "more": found.next_cursor is not None,
        "paged": cursor is not None, "older": older, "query": urlencode(query)})


@router.get("/dead/replay", response_class=HTMLResponse, include_in_schema=False)
def replay_confirm(request: Request, page: Page, conn: Conn) -> Response:
    """The dry run: what a replay of this selection would touch now, and a button."""
    return confirm_page(request, conn, page, schema=_schema(request), tenant=None,
                        action="/dead/replay", back="/dead")


@router.post("/dead/replay", include_in_schema=False)
def replay_run(request: Request, page: Page, _: Posted, conn: Conn,
               enable_endpoints: Annotated[str | None, Form()] = None,
               ids: Annotated[str | None, Form()] = None,
               endpoint: Annotated[str | None, Form()] = None,
               event_type: Annotated[str | None, Form()] = None,
               tenant: Annotated[str | None, Form()] = None) -> Response:
    """Replay the confirmed selection (``outbox replay``), then show where it went."""
    form = {k: v for k, v in {"ids": ids, "endpoint": endpoint, "event_type": event_type,
                              "tenant": tenant}.items() if v}
    try:
        selection = selection_from(form)
        rp.replay(conn, schema=_schema(request), selection=selection,
                          enable_endpoints=bool(enable_endpoints), actor="console")
    except REFUSED as exc:
        return error_page(request, exc, {**page, "back": "/dead"})
    if len(selection.ids) == 1:
        return see_other(request, f"/deliveries/{selection.ids[0]}?done=replayed")
    return see_other(request, "/dead?done=replayed")


@router.get("/deliveries/{delivery_id}", response_class=HTMLResponse, include_in_schema=False)
def delivery_page(request: Request, delivery_id: str, page: Page, conn: Conn,
                  done: str | None = None) -> Response:
    """One delivery, its event and its attempt timeline."""
    try:
        detail = deadletter.show(conn, delivery_id, schema=_schema(request))
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    return render(request, "delivery.html", {
        **page, "page": "dead", "d": detail, "notice": NOTICES.get(done or ""),
        "event_link": f"/events/{detail.event_id}",
        "replay_link": f"/dead/replay?ids={detail.id}"})


@router.get("/events", response_class=HTMLResponse, include_in_schema=False)
def events_page(request: Request, page: Page, conn: Conn, event_type: str | None = None,
                tenant: str | None = None, before: str | None = None) -> Response:
    """Events newest first (keyset pages on the UUIDv7 id), with how their deliveries
    stand."""
    context = {**page, "page": "events", "event_type": event_type or "",
               "tenant": tenant or "", "base": "/events"}
    try:
        cursor = ev.parse_event_id(before) if before else None
        found = ev.list_events(conn, schema=_schema(request), event_type=event_type or None,
                               tenant=tenant or None, before=cursor, limit=50)
    except BAD_INPUT + NOT_FOUND as exc:
        return error_page(request, exc, {**context, "back": "/events"})
    following = None
    if found.next_before:
        query = {k: v for k, v in (("event_type", event_type), ("tenant", tenant)) if v}
        following = urlencode({**query, "before": str(found.next_before)})
    return render(request, "events.html", {**context, "rows": found.events,
                                           "next_query": following})


@router.get("/events/{event_id}", response_class=HTMLResponse, include_in_schema=False)
def event_page(request: Request, event_id: str, page: Page, conn: Conn) -> Response:
    """One event, its payload, and each delivery with its attempt timeline."""
    try:
        event = ev.get_event(conn, event_id, schema=_schema(request))
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    return render(request, "event.html", {**page, "page": "events", "e": event,
                                          "delivery_base": "/deliveries",
                                          "replay_base": "/dead/replay"})
