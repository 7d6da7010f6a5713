"""``POST /api/endpoints/{id}/test-filter`` and ``POST /api/portal/endpoints/{id}/test-filter``:
whether a sample payload (the request body, any JSON value) matches an endpoint's payload
filter, evaluated in the database by the compiled filter emit routes with
(:func:`outbox.admin.filters.try_filter`, as ``outbox endpoints test-filter``). Reads
only. The portal's route answers only for the session tenant's own endpoints (404 for
any other, as if absent)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from outbox.admin import filters
from outbox.web.auth import require_portal
from outbox.web.deps import AppSettings, Conn

router = APIRouter(prefix="/endpoints", tags=["endpoints"])
portal_router = APIRouter(prefix="/portal", tags=["portal"])
Sample = Annotated[Any, Body(description="A sample event payload (any JSON value)")]


def _answer(result: filters.FilterTest) -> dict[str, Any]:
    return {"matches": result.matches, "filter": result.filter,
            "conditions": [{"condition": c, "matches": m} for c, m in result.conditions]}


@router.post("/{endpoint_id}/test-filter")
def test_filter(endpoint_id: str, payload: Sample, conn: Conn,
                settings: AppSettings) -> dict[str, Any]:
    """``matches``: whether the payload matches (true without a filter); ``conditions``:
    each top-level condition of the filter and whether it holds."""
    return _answer(filters.try_filter(conn, endpoint_id, payload,
                                      schema=settings.schema_name))


@portal_router.post("/endpoints/{endpoint_id}/test-filter")
def portal_test_filter(endpoint_id: str, payload: Sample,
                       tenant: Annotated[str, Depends(require_portal)], conn: Conn,
                       settings: AppSettings) -> dict[str, Any]:
    """As the operator's route, for an endpoint of the session's tenant."""
    return _answer(filters.try_filter(conn, endpoint_id, payload,
                                      schema=settings.schema_name, tenant=tenant))
