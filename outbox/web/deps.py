"""Request-scoped helpers of the JSON API: the database connection, query-parameter
parsing that refuses bad input with 422 before any SQL, and JSON shaping."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import uuid
from collections.abc import Iterable, Iterator
from typing import Annotated, Any

import psycopg
from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from outbox._db.connection import connect
from outbox._security.ssrf import IPNetwork, parse_networks
from outbox.admin import _timeparse
from outbox.admin.endpoints import Endpoint
from outbox.admin.flow import FlowState
from outbox.admin.portal import WebSettings
from outbox.web.auth import web_settings
from outbox.web.errors import ApiError


def connection(request: Request) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for one request (each library call commits on its own,
    as from the CLI), closed after the answer."""
    with connect(web_settings(request), autocommit=True) as conn:
        yield conn


Conn = Annotated[psycopg.Connection[Any], Depends(connection)]
AppSettings = Annotated[WebSettings, Depends(web_settings)]


def allow_networks(settings: WebSettings) -> tuple[IPNetwork, ...]:
    """``OUTBOX_ALLOW_NETWORKS``: the registration-time SSRF check, as in the CLI."""
    return parse_networks(settings.allow_networks)


def portal_allow_networks(settings: WebSettings) -> tuple[IPNetwork, ...]:
    """What a portal customer may register in: ``OUTBOX_PORTAL_ALLOW_NETWORKS`` (default
    none: public addresses only), never the operator's ``OUTBOX_ALLOW_NETWORKS``."""
    return parse_networks(settings.portal_allow_networks)


def check_delivery_ids(ids: Iterable[int]) -> None:
    """422 ``invalid_parameter`` for an id no delivery can have (not a positive bigint:
    PostgreSQL would refuse it with an error, a 500)."""
    for i in ids:
        if not 0 < i < 2**63:
            raise ApiError(422, "invalid_parameter", f"ids: {i} is not a delivery id")


def when(name: str, value: str | None) -> dt.datetime | None:
    """A time ago (``2h``) or ISO 8601, else 422 ``invalid_parameter``."""
    if value is None:
        return None
    try:
        return _timeparse.parse_when(value)
    except ValueError as exc:
        raise ApiError(422, "invalid_parameter", f"{name}: {exc}") from None


def duration(name: str, value: str) -> dt.timedelta:
    try:
        return _timeparse.parse_duration(value)
    except ValueError as exc:
        raise ApiError(422, "invalid_parameter", f"{name}: {exc}") from None


def uuid_param(name: str, value: str | None) -> uuid.UUID | None:
    """A UUID query parameter, else 422 ``invalid_parameter``."""
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ApiError(422, "invalid_parameter", f"{name}: {value!r} is not a UUID") from None


def time_range(since: str | None, until: str | None
               ) -> tuple[dt.datetime | None, dt.datetime | None]:
    low, high = when("since", since), when("until", until)
    if low is not None and high is not None and low >= high:
        raise ApiError(422, "invalid_parameter", "since must be before until")
    return low, high


def plain(value: Any) -> Any:
    """Dataclasses, UUIDs, datetimes, decimals and enums as JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if hasattr(value, "value") and not isinstance(value, str | int | float | bool):
        return plain(value.value)  # an Enum
    return value


def endpoint_json(endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint as the API shows it (no secret: :class:`Endpoint` holds none)."""
    data: dict[str, Any] = plain(endpoint)
    return data


def flow_json(state: FlowState) -> dict[str, Any]:
    """An endpoint's flow state as the API shows it (its id is the endpoint's)."""
    data: dict[str, Any] = plain(state)
    data.pop("endpoint_id", None)
    return data


def listing(content: dict[str, Any]) -> JSONResponse:
    """A list answer, already JSON-ready (:func:`plain`): sent as is, without FastAPI's
    second encoding pass, which costs more than the query on a page of 500 rows."""
    return JSONResponse(content)
