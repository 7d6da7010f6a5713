"""``/api/portal/...``: what a customer's portal session may do, and nothing else.

Scope: the session's tenant ``T`` (:func:`outbox.web.auth.require_portal`). A customer
sees and changes only endpoints whose tenant is ``T`` (never an all-tenants or another
tenant's endpoint), events of ``T`` with their deliveries to those endpoints, and replays
dead deliveries to those endpoints. Anything else answers exactly as if it did not exist
(404), so ids of other tenants cannot even be probed. Same library functions as the
operator routes; every check happens before the library is asked to change anything.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from outbox.admin import deadletter as dl
from outbox.admin import endpoints as ep
from outbox.admin import events as ev
from outbox.admin import replay as rp
from outbox.admin import types as catalog
from outbox.errors import DeliveryNotFound, EndpointNotFound, InvalidEndpoint, OperationRefused
from outbox.web.api_keys import keys_json
from outbox.web.api_ops import Limit, dead_cursor, run_replay
from outbox.web.auth import require_portal
from outbox.web.deps import (
    AppSettings,
    Conn,
    check_delivery_ids,
    duration,
    endpoint_json,
    listing,
    plain,
    portal_allow_networks,
    time_range,
    uuid_param,
    when,
)
from outbox.web.models import (
    OptionalDisable,
    OptionalRotate,
    PortalEndpointIn,
    PortalEndpointPatch,
    PortalReplayIn,
    PortalSkipIn,
    RotateIn,
    TypeName,
    credentials_of,
    filter_change,
    oauth2_of,
)

router = APIRouter(prefix="/portal", tags=["portal"])
Tenant = Annotated[str, Depends(require_portal)]


def own_endpoint(conn: Any, schema: str, tenant: str, endpoint_id: str) -> ep.Endpoint:
    """The endpoint if ``tenant`` owns it, else :class:`EndpointNotFound` (as if absent)."""
    endpoint = ep.get(conn, endpoint_id, schema=schema)
    if endpoint.tenant != tenant or endpoint.all_tenants:
        raise EndpointNotFound(f"no endpoint {endpoint_id}")
    return endpoint


@router.get("/endpoints")
def list_endpoints(tenant: Tenant, conn: Conn, settings: AppSettings) -> JSONResponse:
    """The tenant's endpoints, oldest first."""
    rows = ep.list_all(conn, schema=settings.schema_name, tenant=tenant)
    return listing({"tenant": tenant, "endpoints": [endpoint_json(e) for e in rows]})


@router.post("/endpoints", status_code=201)
def create_endpoint(body: PortalEndpointIn, tenant: Tenant, conn: Conn,
                    settings: AppSettings, response: Response) -> dict[str, Any]:
    """Add an endpoint of the tenant; its secret is in this answer only."""
    catalog.check_subscribable(conn, tenant, body.event_types, schema=settings.schema_name)
    created = ep.add(conn, body.url, schema=settings.schema_name, event_types=body.event_types,
                     tenant=tenant, secret=body.secret, headers=body.headers,
                     description=body.description, allow_networks=portal_allow_networks(settings),
                     box=settings.secret_box(), allow_brokers=False,
                     credentials=credentials_of(body), oauth2=oauth2_of(body),
                     signature=body.signature, filter=body.filter)
    response.headers["Cache-Control"] = "no-store"
    return {"endpoint": endpoint_json(created.endpoint), "secret": created.secret,
            "warnings": list(created.warnings)}


@router.get("/endpoints/{endpoint_id}")
def get_endpoint(endpoint_id: str, tenant: Tenant, conn: Conn,
                 settings: AppSettings) -> dict[str, Any]:
    return {"endpoint": endpoint_json(own_endpoint(conn, settings.schema_name, tenant,
                                                   endpoint_id))}


@router.get("/endpoints/{endpoint_id}/public-keys")
def public_keys(endpoint_id: str, tenant: Tenant, conn: Conn,
                settings: AppSettings) -> dict[str, Any]:
    """The ``whpk_`` keys that verify the endpoint's ``v1a`` signatures now (none for
    hmac); another tenant's endpoint: 404."""
    return keys_json(own_endpoint(conn, settings.schema_name, tenant, endpoint_id))


@router.patch("/endpoints/{endpoint_id}")
def update_endpoint(endpoint_id: str, body: PortalEndpointPatch, tenant: Tenant, conn: Conn,
                    settings: AppSettings) -> dict[str, Any]:
    schema = settings.schema_name
    endpoint = own_endpoint(conn, schema, tenant, endpoint_id)
    catalog.check_subscribable(conn, tenant, body.event_types, schema=schema)
    if body.clear_rate_limit and body.rate_limit is not None:
        raise InvalidEndpoint("give a rate_limit or clear_rate_limit, not both")
    if body.rate_limit is not None or body.clear_rate_limit:  # the tenant's own limit
        ep.set_tenant_rate_limit(conn, endpoint.id, body.rate_limit, tenant=tenant,
                                 schema=schema)
    done = ep.update(conn, endpoint.id, schema=schema, url=body.url,
                     event_types=body.event_types or None,
                     all_event_types=body.all_event_types, headers=body.headers,
                     clear_headers=body.clear_headers, description=body.description,
                     allow_networks=portal_allow_networks(settings), allow_brokers=False,
                     box=settings.secret_box(), credentials=credentials_of(body),
                     oauth2=oauth2_of(body), clear_oauth2=body.clear_oauth2,
                     **filter_change(body))
    return {"endpoint": endpoint_json(done.endpoint), "warnings": list(done.warnings)}


@router.post("/endpoints/{endpoint_id}/disable")
def disable_endpoint(endpoint_id: str, tenant: Tenant, conn: Conn, settings: AppSettings,
                     body: OptionalDisable = None) -> dict[str, Any]:
    schema = settings.schema_name
    endpoint = own_endpoint(conn, schema, tenant, endpoint_id)
    reason = body.reason if body else "disabled in the portal"
    return {"endpoint": endpoint_json(ep.set_enabled(conn, endpoint.id, False, schema=schema,
                                                     reason=reason, actor="tenant"))}


@router.post("/endpoints/{endpoint_id}/enable")
def enable_endpoint(endpoint_id: str, tenant: Tenant, conn: Conn,
                    settings: AppSettings) -> dict[str, Any]:
    schema = settings.schema_name
    endpoint = own_endpoint(conn, schema, tenant, endpoint_id)
    return {"endpoint": endpoint_json(ep.set_enabled(conn, endpoint.id, True, schema=schema,
                                                     actor="tenant"))}


@router.post("/endpoints/{endpoint_id}/rotate-secret")
def rotate_secret(endpoint_id: str, tenant: Tenant, conn: Conn, settings: AppSettings,
                  response: Response, body: OptionalRotate = None
                  ) -> dict[str, Any]:
    """A new secret, in this answer only; the old one signs beside it for ``grace``."""
    body = body or RotateIn()
    schema = settings.schema_name
    endpoint = own_endpoint(conn, schema, tenant, endpoint_id)
    rotated = ep.rotate_secret(conn, endpoint.id, schema=schema,
                               grace=duration("grace", body.grace), force=body.force,
                               box=settings.secret_box())
    response.headers["Cache-Control"] = "no-store"
    return {"endpoint": endpoint_json(rotated.endpoint), "secret": rotated.secret}


@router.get("/types")
def list_types(tenant: Tenant, conn: Conn, settings: AppSettings) -> JSONResponse:
    """The event catalog as this tenant sees it: the types its endpoints may subscribe to,
    with schema and example."""
    found = catalog.offered(conn, tenant, schema=settings.schema_name)
    return listing({"types": [_public(t) for t in found]})


@router.get("/types/{name:path}")
def get_type(name: TypeName, tenant: Tenant, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """One type the tenant is offered (404 otherwise, as if it did not exist)."""
    return {"type": _public(catalog.get_offered(conn, name, tenant,
                                                schema=settings.schema_name))}


def _public(entry: catalog.EventType) -> dict[str, Any]:
    """A catalog entry as a tenant sees it (not which other tenants are offered it)."""
    return {k: v for k, v in entry.as_json().items() if k != "tenants"}


@router.get("/events")
def list_events(tenant: Tenant, conn: Conn, settings: AppSettings,
                type: str | None = None, since: str | None = None,
                until: str | None = None, before: str | None = None,
                limit: int = Limit) -> JSONResponse:
    """The tenant's delivery log: its events newest first, counting deliveries to its own
    endpoints (pages as ``GET /api/events``)."""
    low, high = time_range(since, until)
    page = ev.list_events(conn, schema=settings.schema_name, event_type=type, tenant=tenant,
                          owner=tenant, since=low, until=high,
                          before=uuid_param("before", before), limit=limit)
    return listing({"events": plain(page.events), "next_before": plain(page.next_before)})


@router.get("/events/{event_id}")
def get_event(event_id: str, tenant: Tenant, conn: Conn,
              settings: AppSettings) -> dict[str, Any]:
    """One of the tenant's events, its deliveries to its endpoints and every attempt."""
    return {"event": plain(ev.get_event(conn, event_id, schema=settings.schema_name,
                                        owner=tenant))}


def _endpoints(conn: Any, schema: str, tenant: str, endpoint: str | None) -> list[uuid.UUID]:
    if endpoint is not None:
        return [own_endpoint(conn, schema, tenant, endpoint).id]
    return [e.id for e in ep.list_all(conn, schema=schema, tenant=tenant)]


@router.get("/dead")
def list_dead(tenant: Tenant, conn: Conn, settings: AppSettings, endpoint: str | None = None,
              since: str | None = None, cursor: str | None = None,
              limit: int = Limit) -> JSONResponse:
    """Dead deliveries to the tenant's endpoints, most recently dead first; pages as
    ``GET /api/dead`` (``next_cursor`` back as ``cursor``)."""
    schema = settings.schema_name
    sel = dl.Selection(since=when("since", since), tenant=tenant)
    page = dl.list_dead(conn, schema=schema, selection=sel, limit=limit,
                        after=dead_cursor(cursor),
                        endpoints=_endpoints(conn, schema, tenant, endpoint))
    return listing({"dead": plain(page.rows),
                    "next_cursor": None if page.next_cursor is None else str(page.next_cursor)})


@router.post("/replay")
def replay(body: PortalReplayIn, tenant: Tenant, conn: Conn,
           settings: AppSettings) -> dict[str, Any]:
    """Re-queue the tenant's dead deliveries: ``ids``, or those of one ``endpoint``, or
    ``all`` (optionally ``since``). Dry run unless ``confirm``; a disabled endpoint is
    refused (409): enable it first."""
    schema = settings.schema_name
    if bool(body.ids) + bool(body.endpoint) + body.all != 1:
        raise OperationRefused("give ids, endpoint or all (exactly one)")
    if body.ids:
        check_delivery_ids(body.ids)
        owned = ev.owned_deliveries(conn, body.ids, schema=schema, owner=tenant)
        missing = sorted(set(body.ids) - owned)
        if missing:
            raise DeliveryNotFound("no delivery " + ", ".join(map(str, missing)))
        sels = [dl.Selection(ids=tuple(body.ids), tenant=tenant)]
    else:
        since = when("since", body.since)
        sels = [dl.Selection(endpoint_id=eid, since=since, tenant=tenant)
                for eid in _endpoints(conn, schema, tenant, body.endpoint)]
    return _replay_all(conn, schema, sels, body.confirm, f"portal replay by tenant {tenant}")


def _replay_all(conn: Any, schema: str, sels: list[dl.Selection], confirm: bool,
                actor: str) -> dict[str, Any]:
    plans = [run_replay(conn, schema, s, False, False, actor) for s in sels]
    refusal = next((p["refusal"] for p in plans if p["refusal"]), None)
    answer: dict[str, Any] = {"dry_run": not confirm,
                              "total": sum(p["total"] for p in plans),
                              "endpoints": [e for p in plans for e in p["endpoints"]],
                              "refusal": refusal}
    if not confirm:
        return answer
    if refusal:
        raise OperationRefused(refusal.replace("`outbox endpoints enable ID` or pass "
                                               "--enable-endpoint", "enable it first"))
    results = [rp.replay(conn, schema=schema, selection=s, actor=actor) for s in sels]
    return {**answer, "result": {"replayed": sum(r.replayed for r in results),
                                 "skipped": sum(r.skipped for r in results)}}


@router.post("/skip")
def skip(body: PortalSkipIn, tenant: Tenant, conn: Conn, settings: AppSettings
         ) -> dict[str, Any]:
    """Give up on dead deliveries to the tenant's endpoints that hold their ordering key:
    the key's next delivery goes out now (``POST /api/dead/skip``, scoped)."""
    schema = settings.schema_name
    check_delivery_ids(body.ids)
    owned = ev.owned_deliveries(conn, body.ids, schema=schema, owner=tenant)
    missing = sorted(set(body.ids) - owned)
    if missing:
        raise DeliveryNotFound("no delivery " + ", ".join(map(str, missing)))
    result = dl.skip(conn, body.ids, schema=schema, tenant=tenant,
                     actor=f"portal skip by tenant {tenant}")
    return {"skipped": result.skipped, "unchanged": result.unchanged}
