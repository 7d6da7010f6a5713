"""``/api/endpoints``: the operator's endpoint routes, over :mod:`outbox.admin.endpoints` (the
functions ``outbox endpoints ...`` calls). Secrets appear only in the answers of create
(when generated) and rotate, once; the credentials (secret headers, auth, TLS client
certificate) are write-only: never in any answer."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from outbox import worker as worker_seam
from outbox.admin import endpoints as ep
from outbox.admin import events as ev
from outbox.admin import flow
from outbox.admin.endpoint_oauth2 import client_secret
from outbox.web.api_keys import keys_json
from outbox.web.deps import (
    AppSettings,
    Conn,
    allow_networks,
    duration,
    endpoint_json,
    flow_json,
    listing,
    plain,
    uuid_param,
)
from outbox.web.models import (
    EndpointIn,
    EndpointPatch,
    OptionalDisable,
    OptionalRotate,
    RotateIn,
    credentials_of,
    filter_change,
    oauth2_of,
    options_of,
)

router = APIRouter(prefix="/endpoints", tags=["endpoints"])


@router.get("")
def list_endpoints(conn: Conn, settings: AppSettings, tenant: str | None = None,
                   enabled: bool | None = None, after: str | None = None,
                   limit: int = Query(100, ge=1, le=ev.MAX_PAGE)) -> JSONResponse:
    """Endpoints oldest first; ``tenant``: that tenant's own; ``enabled``: only enabled
    (true) or disabled (false) ones. Pages: pass ``next_after`` as ``after``."""
    page = ev.list_endpoints(conn, schema=settings.schema_name, tenant=tenant,
                             enabled=enabled, after=uuid_param("after", after), limit=limit)
    return listing({"endpoints": [endpoint_json(e) for e in page.endpoints],
                    "next_after": plain(page.next_after)})


@router.post("", status_code=201)
def create_endpoint(body: EndpointIn, conn: Conn, settings: AppSettings,
                    response: Response) -> dict[str, Any]:
    """Register an endpoint; ``secret`` is in this answer only (when generated)."""
    created = ep.add(
        conn, body.url, schema=settings.schema_name, event_types=body.event_types,
        tenant=body.tenant, all_tenants=body.all_tenants, secret=body.secret,
        headers=body.headers, description=body.description, options=options_of(body),
        rate_limit=body.rate_limit, rate_burst=body.rate_burst,
        allow_networks=allow_networks(settings),
        box=settings.secret_box(), credentials=credentials_of(body), oauth2=oauth2_of(body),
        signature=body.signature, filter=body.filter)
    response.headers["Cache-Control"] = "no-store"
    return {"endpoint": endpoint_json(created.endpoint), "secret": created.secret,
            "warnings": list(created.warnings)}


@router.get("/{endpoint_id}")
def get_endpoint(endpoint_id: str, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """The endpoint, and its ``flow``: the allowed rate every worker together may send at
    (null: unlimited) and whether it is throttled (after 429/503/timeouts) or paused."""
    endpoint = ep.get(conn, endpoint_id, schema=settings.schema_name)
    state = flow.state(conn, endpoint.id, schema=settings.schema_name)
    return {"endpoint": endpoint_json(endpoint), "flow": flow_json(state)}


@router.patch("/{endpoint_id}")
def update_endpoint(endpoint_id: str, body: EndpointPatch, conn: Conn,
                    settings: AppSettings) -> dict[str, Any]:
    """Change an endpoint; absent fields keep their value (as ``outbox endpoints update``)."""
    done = ep.update(
        conn, endpoint_id, schema=settings.schema_name, url=body.url,
        event_types=body.event_types or None, all_event_types=body.all_event_types,
        headers=body.headers, clear_headers=body.clear_headers, description=body.description,
        options=options_of(body), rate_limit=body.rate_limit, rate_burst=body.rate_burst,
        clear_rate_limit=body.clear_rate_limit,
        allow_networks=allow_networks(settings), box=settings.secret_box(),
        credentials=credentials_of(body), oauth2=oauth2_of(body),
        clear_oauth2=body.clear_oauth2, **filter_change(body))
    return {"endpoint": endpoint_json(done.endpoint), "warnings": list(done.warnings)}


@router.post("/{endpoint_id}/enable")
def enable_endpoint(endpoint_id: str, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """Resume deliveries (parked ones become due now)."""
    e = ep.set_enabled(conn, endpoint_id, True, schema=settings.schema_name)
    return {"endpoint": endpoint_json(e)}


@router.post("/{endpoint_id}/disable")
def disable_endpoint(endpoint_id: str, conn: Conn, settings: AppSettings,
                     body: OptionalDisable = None) -> dict[str, Any]:
    """Stop deliveries; pending ones wait until the endpoint is enabled."""
    reason = body.reason if body else "manual"
    e = ep.set_enabled(conn, endpoint_id, False, schema=settings.schema_name, reason=reason)
    return {"endpoint": endpoint_json(e)}


@router.post("/{endpoint_id}/rotate-secret")
def rotate_secret(endpoint_id: str, conn: Conn, settings: AppSettings, response: Response,
                  body: OptionalRotate = None) -> dict[str, Any]:
    """A new secret, in this answer only; the old one signs beside it for ``grace``."""
    body = body or RotateIn()
    rotated = ep.rotate_secret(conn, endpoint_id, schema=settings.schema_name,
                               grace=duration("grace", body.grace), force=body.force,
                               box=settings.secret_box())
    response.headers["Cache-Control"] = "no-store"
    return {"endpoint": endpoint_json(rotated.endpoint), "secret": rotated.secret}


@router.get("/{endpoint_id}/public-keys")
def public_keys(endpoint_id: str, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """The ``whpk_`` keys that verify its ``v1a`` signatures now (none for hmac)."""
    return keys_json(ep.get(conn, endpoint_id, schema=settings.schema_name))


@router.post("/{endpoint_id}/ping")
def ping_endpoint(endpoint_id: str, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """Send a signed ``outbox.ping`` now through the worker's sender; nothing is written.
    ``ok`` is true only for a 2xx answer."""
    endpoint = ep.get(conn, endpoint_id, schema=settings.schema_name)
    secrets = ep.signing_secrets(conn, endpoint.id, schema=settings.schema_name,
                                 box=settings.secret_box())
    own = {"database_url": settings.database_url, "schema_name": settings.schema_name,
           "allow_networks": settings.allow_networks}
    credentials = ep.url_credentials(conn, endpoint.id, schema=settings.schema_name,
                                     box=settings.secret_box())
    auth = ep.delivery_credentials(conn, endpoint.id, schema=settings.schema_name,
                                   box=settings.secret_box())
    oauth2_secret = client_secret(conn, endpoint.id, schema=settings.schema_name,
                                  box=settings.secret_box())
    result = worker_seam.ping(own, endpoint, secrets, credentials, auth, oauth2_secret)
    return {"ping": {**plain(result), "ok": result.ok}}
