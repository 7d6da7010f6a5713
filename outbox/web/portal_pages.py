"""Tenant portal pages (server-rendered HTML); :func:`outbox.web.create_app` includes the
router under ``/portal`` (route paths here are relative to it).

A portal session (:func:`outbox.web.auth.require_portal`, opened by a signed link) carries
one tenant; every page reads and changes only that tenant's own endpoints (never an
all-tenants one), and only deliveries of that tenant's events to those endpoints. Anything
else answers 404, exactly like an id that does not exist. A new or rotated secret is shown
once, on a page that no cache may keep; no other page shows a secret.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Annotated, Any
from urllib.parse import urlencode

import psycopg
from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from outbox.admin import deadletter
from outbox.admin import endpoints as ep
from outbox.admin import events as ev
from outbox.admin import replay as rp
from outbox.admin import types as catalog
from outbox.admin.endpoint_oauth2 import OAuth2Options
from outbox.errors import DeliveryNotFound, EndpointNotFound, OperationRefused
from outbox.web import auth
from outbox.web.deps import connection, portal_allow_networks
from outbox.web.errors import NotAuthenticated
from outbox.web.pages import BAD_INPUT, NOT_FOUND, REFUSED, error_page, render, root, see_other
from outbox.web.replay_pages import confirm_page, selection_from

router = APIRouter()
Conn = Annotated[psycopg.Connection[Any], Depends(connection)]
GRACES = {"0": dt.timedelta(0), "1": dt.timedelta(hours=1), "24": dt.timedelta(hours=24),
          "168": dt.timedelta(days=7)}
NOTICES = {"updated": "Endpoint saved.", "enabled": "Endpoint enabled.",
           "disabled": "Endpoint disabled.",
           "replayed": "Replayed: the deliveries are back in the queue."}


def tenant_page(request: Request) -> dict[str, Any]:
    """Dependency of every portal page: the portal session's tenant (else a 401 page)
    and the context every template needs."""
    try:
        tenant = auth.require_portal(request)
    except NotAuthenticated:
        raise HTTPException(303, headers={"Location": f"{root(request)}/portal/expired"}
                            ) from None
    return {"area": "portal", "tenant": tenant, "csrf": auth.csrf_token(request)}


@router.get("/expired", response_class=HTMLResponse, include_in_schema=False)
def expired(request: Request) -> Response:
    """Where a request without a (valid) portal session lands: 401, ask for a new link."""
    return render(request, "error.html", {
        "area": None, "heading": "Your portal session has ended",
        "message": "Open a fresh portal link from the service that sent you here."},
        status_code=401)


Page = Annotated[dict[str, Any], Depends(tenant_page)]
Posted = Annotated[None, Depends(auth.verify_csrf)]


def _schema(request: Request) -> str:
    return auth.web_settings(request).schema_name


def _owned(conn: psycopg.Connection[Any], request: Request, tenant: str,
           endpoint_id: str) -> ep.Endpoint:
    """The tenant's own endpoint, or EndpointNotFound (as if it did not exist)."""
    endpoint = ep.get(conn, endpoint_id, schema=_schema(request))
    if endpoint.tenant != tenant or endpoint.all_tenants:
        raise EndpointNotFound(f"no endpoint {endpoint.id}")
    return endpoint


OPERATIONAL = "outbox.*"


def _types(text: str, operational: str = "") -> list[str] | None:
    """Event-type filters typed as "a.b, c.*" (commas or spaces), plus ``outbox.*`` when the
    operational events box is ticked; none: every type (operational events excluded)."""
    found = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if operational and OPERATIONAL not in found:
        found.append(OPERATIONAL)
    return found or None


@router.get("", response_class=HTMLResponse, include_in_schema=False)
@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def home(request: Request, page: Page, conn: Conn, done: str | None = None) -> Response:
    """The tenant's endpoints, their health, and the form to add one."""
    return _home(request, page, conn, notice=NOTICES.get(done or ""))


def _home(request: Request, page: dict[str, Any], conn: psycopg.Connection[Any], *,
          notice: str | None = None, error: str | None = None,
          form: dict[str, str] | None = None, status: int = 200) -> Response:
    schema, tenant = _schema(request), page["tenant"]
    mine = ep.list_all(conn, schema=schema, tenant=tenant)
    health = {h.stats.endpoint_id: h for h in ev.endpoint_health(conn, schema=schema,
                                                                tenant=tenant)}
    rows = [{"endpoint": e, "health": health.get(e.id)} for e in mine]
    return render(request, "portal_endpoints.html", {
        **page, "page": "endpoints", "rows": rows, "notice": notice, "error": error,
        "form": form or {}, "offered": _offered(conn, request, tenant)}, status_code=status)


def _offered(conn: psycopg.Connection[Any], request: Request, tenant: str) -> list[str]:
    """The registered types the endpoint form offers the tenant (the catalog's names)."""
    return [t.name for t in catalog.offered(conn, tenant, schema=_schema(request))
            if not t.deprecated]


def _oauth2_fields(oauth2_token_url: Annotated[str, Form()] = "",
                   oauth2_client_id: Annotated[str, Form()] = "",
                   oauth2_client_secret: Annotated[str, Form()] = "",
                   oauth2_scope: Annotated[str, Form()] = "",
                   clear_oauth2: Annotated[str, Form()] = "") -> dict[str, str]:
    """The OAuth2 fields of the add and edit forms, as posted."""
    return {"oauth2_token_url": oauth2_token_url, "oauth2_client_id": oauth2_client_id,
            "oauth2_client_secret": oauth2_client_secret, "oauth2_scope": oauth2_scope,
            "clear_oauth2": clear_oauth2}


OAuth2Form = Annotated[dict[str, str], Depends(_oauth2_fields)]


def _oauth2(fields: dict[str, str], configured: bool = False) -> OAuth2Options:
    """The options the form gives: empty fields are not given (an empty secret keeps the
    current one), except the scope of an endpoint with OAuth2 (empty: none)."""
    values = {k: v.strip() for k, v in fields.items() if k != "clear_oauth2" and v.strip()}
    if configured or values:
        values.setdefault("oauth2_scope", "")
    return OAuth2Options.checked(values)


def _shown(fields: dict[str, str]) -> dict[str, str]:
    """The fields a refused form shows again: never the client secret."""
    return {k: v for k, v in fields.items() if k != "oauth2_client_secret"}


@router.post("/endpoints", response_class=HTMLResponse, include_in_schema=False)
def add(request: Request, page: Page, _: Posted, conn: Conn, oauth2: OAuth2Form,
        url: Annotated[str, Form()] = "", description: Annotated[str, Form()] = "",
        event_types: Annotated[str, Form()] = "",
        operational: Annotated[str, Form()] = "",
        signature: Annotated[str, Form()] = "hmac",
        payload_filter: Annotated[str, Form()] = "") -> Response:
    """Register an endpoint of the tenant; its generated secret is shown once (an ed25519
    one: its public key)."""
    settings = auth.web_settings(request)
    try:
        catalog.check_subscribable(conn, page["tenant"], _types(event_types),
                                   schema=settings.schema_name)
        created = ep.add(conn, url.strip(), schema=settings.schema_name, tenant=page["tenant"],
                         description=description.strip()[:500],
                         event_types=_types(event_types, operational),
                         allow_networks=portal_allow_networks(settings), box=settings.secret_box(),
                         allow_brokers=False, oauth2=_oauth2(oauth2), signature=signature,
                         filter=payload_filter.strip() or None)
    except BAD_INPUT as exc:
        form = {"url": url, "description": description, "event_types": event_types,
                "operational": operational, "signature": signature,
                "payload_filter": payload_filter, **_shown(oauth2)}
        return _home(request, page, conn, error=str(exc), form=form, status=400)
    return render(request, "portal_secret.html", {
        **page, "page": "endpoints", "endpoint": created.endpoint, "secret": created.secret,
        "warnings": created.warnings, "created": True}, no_store=True)


@router.get("/endpoints/{endpoint_id}", response_class=HTMLResponse,
            include_in_schema=False)
def edit_form(request: Request, endpoint_id: str, page: Page, conn: Conn) -> Response:
    """The edit form of one of the tenant's endpoints."""
    try:
        endpoint = _owned(conn, request, page["tenant"], endpoint_id)
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    return render(request, "portal_edit.html", {
        **page, "page": "endpoints", "e": endpoint, "form": _form_of(endpoint),
        "offered": _offered(conn, request, page["tenant"])})


def _form_of(endpoint: ep.Endpoint) -> dict[str, str]:
    types = endpoint.event_types or []
    return {"url": endpoint.url, "description": endpoint.description,
            "event_types": ", ".join(t for t in types if t != OPERATIONAL),
            "operational": "on" if OPERATIONAL in types else "",
            "oauth2_token_url": endpoint.oauth2_token_url or "",
            "oauth2_client_id": endpoint.oauth2_client_id or "",
            "oauth2_scope": endpoint.oauth2_scope or "",
            "payload_filter": json.dumps(endpoint.filter, ensure_ascii=False)
            if endpoint.filter else ""}


@router.post("/endpoints/{endpoint_id}", response_class=HTMLResponse,
             include_in_schema=False)
def save(request: Request, endpoint_id: str, page: Page, _: Posted, conn: Conn,
         oauth2: OAuth2Form,
         url: Annotated[str, Form()] = "", description: Annotated[str, Form()] = "",
         event_types: Annotated[str, Form()] = "",
         operational: Annotated[str, Form()] = "",
         payload_filter: Annotated[str, Form()] = "") -> Response:
    """Change the URL, description, event types, OAuth2 and payload filter (empty: none);
    nothing changes on a refusal."""
    settings = auth.web_settings(request)
    try:
        endpoint = _owned(conn, request, page["tenant"], endpoint_id)
    except NOT_FOUND as exc:
        return error_page(request, exc, page)
    types = _types(event_types, operational)
    clear = bool(oauth2["clear_oauth2"])
    try:
        catalog.check_subscribable(conn, page["tenant"], types, schema=settings.schema_name)
        ep.update(conn, endpoint.id, schema=settings.schema_name, url=url.strip(),
                  description=description.strip()[:500], event_types=types,
                  all_event_types=types is None, allow_networks=portal_allow_networks(settings),
                  allow_brokers=False, box=settings.secret_box(), clear_oauth2=clear,
                  oauth2=None if clear else _oauth2(oauth2, endpoint.oauth2_token_url is not None),
                  filter=payload_filter.strip() or None,
                  clear_filter=not payload_filter.strip())
    except BAD_INPUT as exc:
        form = {"url": url, "description": description, "event_types": event_types,
                "operational": operational, "payload_filter": payload_filter,
                **_shown(oauth2)}
        return render(request, "portal_edit.html", {
            **page, "page": "endpoints", "e": endpoint, "form": form, "error": str(exc),
            "offered": _offered(conn, request, page["tenant"])}, status_code=400)
    return see_other(request, "/portal/?done=updated")


@router.post("/endpoints/{endpoint_id}/{action}", response_class=HTMLResponse,
             include_in_schema=False)
def endpoint_action(request: Request, endpoint_id: str, action: str, page: Page,
                    _: Posted, conn: Conn, grace: Annotated[str, Form()] = "24") -> Response:
    """Enable, disable, or rotate the secret of one of the tenant's endpoints."""
    schema = _schema(request)
    try:
        endpoint = _owned(conn, request, page["tenant"], endpoint_id)
        if action in ("enable", "disable"):
            ep.set_enabled(conn, endpoint.id, action == "enable", schema=schema,
                           reason="disabled in the portal", actor="tenant")
            return see_other(request, f"/portal/?done={action}d")
        if action != "rotate":
            raise EndpointNotFound(f"no such action {action!r}")
        if grace not in GRACES:
            raise ValueError(f"grace must be one of {', '.join(GRACES)} hours")
        rotated = ep.rotate_secret(conn, endpoint.id, schema=schema, grace=GRACES[grace],
                                   box=auth.web_settings(request).secret_box())
    except REFUSED as exc:
        return error_page(request, exc, page)
    return render(request, "portal_secret.html", {
        **page, "page": "endpoints", "endpoint": rotated.endpoint, "secret": rotated.secret,
        "warnings": (), "created": False}, no_store=True)


@router.get("/log", response_class=HTMLResponse, include_in_schema=False)
def log(request: Request, page: Page, conn: Conn, event_type: str | None = None,
        before: str | None = None, done: str | None = None) -> Response:
    """The tenant's events, newest first, with how its own deliveries stand, and its
    failed deliveries per endpoint."""
    schema, tenant = _schema(request), page["tenant"]
    context = {**page, "page": "log", "base": "/portal/events", "event_type": event_type or "",
               "heading": "Recent events", "level": 2, "list_action": "/portal/log",
               "notice": NOTICES.get(done or "")}
    try:
        cursor = ev.parse_event_id(before) if before else None
        found = ev.list_events(conn, schema=schema, event_type=event_type or None,
                               tenant=tenant, owner=tenant, before=cursor, limit=50)
    except BAD_INPUT + NOT_FOUND as exc:
        return error_page(request, exc, {**context, "back": "/portal/log"})
    dead = [(e, deadletter.list_dead(conn, schema=schema, limit=20, selection=deadletter.
                                     Selection(endpoint_id=e.id, tenant=tenant)).rows)
            for e in ep.list_all(conn, schema=schema, tenant=tenant)]
    following = None
    if found.next_before:
        following = urlencode({"before": str(found.next_before),
                               **({"event_type": event_type} if event_type else {})})
    return render(request, "portal_log.html", {
        **context, "rows": found.events, "next_query": following,
        "dead": [(e, rows) for e, rows in dead if rows]})


@router.get("/events/{event_id}", response_class=HTMLResponse, include_in_schema=False)
def event(request: Request, event_id: str, page: Page, conn: Conn) -> Response:
    """One of the tenant's events with its deliveries to the tenant's endpoints."""
    tenant = page["tenant"]
    try:
        found = ev.get_event(conn, event_id, schema=_schema(request), owner=tenant)
    except NOT_FOUND as exc:
        return error_page(request, exc, {**page, "back": "/portal/log"})
    return render(request, "event.html", {**page, "page": "log", "e": found,
                                          "replay_base": "/portal/replay"})


def _portal_selection(request: Request, conn: psycopg.Connection[Any], tenant: str,
                      fields: Any) -> deadletter.Selection:
    """The selection of a portal replay: of the tenant's own endpoint(s) only."""
    selection = selection_from(fields, tenant=tenant)
    if selection.endpoint_id is not None:
        _owned(conn, request, tenant, str(selection.endpoint_id))
    elif not selection.ids:
        raise ValueError("choose an endpoint or deliveries to replay")
    if selection.ids:
        owned = ev.owned_deliveries(conn, list(selection.ids), schema=_schema(request),
                                    owner=tenant)
        missing = sorted(set(selection.ids) - owned)
        if missing:
            raise DeliveryNotFound("no delivery " + ", ".join(map(str, missing)))
    return selection


@router.get("/replay", response_class=HTMLResponse, include_in_schema=False)
def replay_confirm(request: Request, page: Page, conn: Conn) -> Response:
    """The dry run of a replay of the tenant's failed deliveries, and a button."""
    try:
        selection = _portal_selection(request, conn, page["tenant"], request.query_params)
    except BAD_INPUT + NOT_FOUND as exc:
        return error_page(request, exc, {**page, "back": "/portal/log"})
    return confirm_page(request, conn, {**page, "page": "log"}, schema=_schema(request),
                        tenant=page["tenant"], action="/portal/replay", back="/portal/log",
                        selection=selection)


@router.post("/replay", response_class=HTMLResponse, include_in_schema=False)
def replay_run(request: Request, page: Page, _: Posted, conn: Conn,
               enable_endpoints: Annotated[str | None, Form()] = None,
               ids: Annotated[str | None, Form()] = None,
               endpoint: Annotated[str | None, Form()] = None,
               event_type: Annotated[str | None, Form()] = None) -> Response:
    """Replay the confirmed selection of the tenant's failed deliveries. A disabled
    endpoint is refused (as ``POST /api/portal/replay``): the customer enables it on the
    endpoints page first, deliberately."""
    fields = {k: v for k, v in {"ids": ids, "endpoint": endpoint,
                                "event_type": event_type}.items() if v}
    try:
        if enable_endpoints:
            raise OperationRefused("a portal replay does not enable endpoints: enable the "
                                   "endpoint on the Endpoints page first")
        selection = _portal_selection(request, conn, page["tenant"], fields)
        rp.replay(conn, schema=_schema(request), selection=selection,
                          actor=f"portal {page['tenant']}")
    except REFUSED as exc:
        return error_page(request, exc, {**page, "back": "/portal/log"})
    return see_other(request, "/portal/log?done=replayed")
