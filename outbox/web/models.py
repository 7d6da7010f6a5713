"""Request bodies of the JSON API. Unknown fields are refused (422), so a typo never
silently does nothing; the library validates the values themselves before any SQL."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body
from pydantic import BaseModel, ConfigDict, Field

_Types = list[str] | None
_Headers = dict[str, str] | None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PortalEndpointIn(Strict):
    """A customer's new endpoint (its tenant is the portal session's)."""

    url: str = Field(max_length=2048)
    event_types: _Types = Field(default=None, max_length=100)
    headers: _Headers = None
    description: str = Field(default="", max_length=1000)
    secret: str | None = Field(default=None, max_length=200)


class EndpointIn(PortalEndpointIn):
    """``POST /api/endpoints``: as ``outbox endpoints add``."""

    tenant: str | None = None
    all_tenants: bool = False
    max_attempts: int | None = None
    retry_base_seconds: float | None = None
    retry_cap_seconds: float | None = None
    timeout_seconds: float | None = None
    max_in_flight: int | None = None
    rate_limit: float | None = None
    rate_burst: int | None = None


class PortalEndpointPatch(Strict):
    """A customer's change to its endpoint; absent fields keep their value."""

    url: str | None = Field(default=None, max_length=2048)
    event_types: _Types = Field(default=None, max_length=100)
    all_event_types: bool = False
    headers: _Headers = None
    clear_headers: bool = False
    description: str | None = Field(default=None, max_length=1000)
    # requests per second (the portal: the tenant's own, at most the operator's)
    rate_limit: float | None = None
    clear_rate_limit: bool = False


class EndpointPatch(PortalEndpointPatch):
    """``PATCH /api/endpoints/{id}``: as ``outbox endpoints update``."""

    max_attempts: int | None = None
    retry_base_seconds: float | None = None
    retry_cap_seconds: float | None = None
    timeout_seconds: float | None = None
    rate_burst: int | None = None


class DisableIn(Strict):
    reason: str = Field(default="manual", max_length=500)


class RotateIn(Strict):
    """``grace``: how long the old secret keeps signing (``24h``, ``0s``...)."""

    grace: str = Field(default="24h", max_length=32)
    force: bool = False


class ReplayIn(Strict):
    """``POST /api/dead/replay``: the selectors of ``outbox replay``. Without ``confirm``
    it is a dry run: what would be replayed, nothing changed."""

    ids: list[int] = Field(default_factory=list, max_length=10000)
    endpoint: str | None = Field(default=None, max_length=64)
    event_type: str | None = Field(default=None, max_length=128)
    since: str | None = Field(default=None, max_length=64)
    until: str | None = Field(default=None, max_length=64)
    tenant: str | None = None
    all: bool = False
    enable_endpoints: bool = False
    confirm: bool = False


class SkipIn(Strict):
    """``POST /api/dead/skip``: dead heads of ordered keys to give up on (``outbox dead
    skip``); ``tenant`` refuses ids of other tenants' events."""

    ids: list[int] = Field(min_length=1, max_length=1000)
    tenant: str | None = None


class PortalLinkIn(Strict):
    """``POST /api/portal-links``: a link to ``tenant``'s portal, valid for ``expires``;
    ``base_url`` defaults to the URL this request came in on."""

    tenant: str
    expires: str = Field(default="1h", max_length=32)
    base_url: str | None = Field(default=None, max_length=2048)


class PortalSkipIn(Strict):
    ids: list[int] = Field(min_length=1, max_length=1000)


class PortalReplayIn(Strict):
    """``POST /api/portal/replay``: the customer's own dead deliveries (``ids``, or those
    of one of its ``endpoint``s, or all since ``since``); dry run unless ``confirm``."""

    ids: list[int] = Field(default_factory=list, max_length=1000)
    endpoint: str | None = Field(default=None, max_length=64)
    since: str | None = Field(default=None, max_length=64)
    all: bool = False
    confirm: bool = False


OptionalDisable = Annotated[DisableIn | None, Body()]
OptionalRotate = Annotated[RotateIn | None, Body()]


class EventTypeIn(Strict):
    """``POST /api/types``: as ``outbox types add``. ``schema``: a JSON Schema (draft
    2020-12) object; ``tenants``: whom the portal offers it to (null: every tenant)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(max_length=128)
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = Field(default=None, max_length=2000)
    example: Any = None
    tenants: list[str] | None = Field(default=None, max_length=1000)


class EventTypePatch(Strict):
    """``PATCH /api/types/{name}``: absent fields keep their value; ``"schema": null``
    drops the schema, ``"tenants": null`` offers the type to every tenant."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = Field(default=None, max_length=2000)
    example: Any = None
    deprecated: bool | None = None
    tenants: list[str] | None = Field(default=None, max_length=1000)
