"""Request bodies of the JSON API. Unknown fields are refused (422), so a typo never
silently does nothing; the library validates the values themselves before any SQL."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Path
from pydantic import BaseModel, ConfigDict, Field

from outbox.admin.endpoint_oauth2 import OAuth2Fields, OAuth2Options
from outbox.admin.endpoint_options import (
    RATE_MAX,
    TEXT_PATTERN,
    CredentialChanges,
    EndpointCredentials,
    EndpointOptions,
    Headers,
    Signature,
)
from outbox.admin.endpoints import DESCRIPTION_MAX_LENGTH, URL_MAX_LENGTH

_Types = list[str] | None
# requests per second to an endpoint across every worker, and how many at once above that
_RateLimit = Annotated[float | None, Field(gt=0, le=RATE_MAX, allow_inf_nan=False, strict=True)]
# (lax, unlike the rate: a JSON Schema integer may be written 20.0)
_RateBurst = Annotated[int | None, Field(ge=1, le=RATE_MAX)]
_Headers = Headers | None
# A delivery id (a bigint): the routes refuse others with 422 invalid_parameter
# (outbox.web.deps.check_delivery_ids); the schema states the range.
DeliveryId = Annotated[int, Field(json_schema_extra={"minimum": 1, "maximum": 2**53 - 1})]
# The forms the server parses (outbox.admin._timeparse), stated for clients; the routes check.
DURATION: dict[str, Any] = {"pattern": "^[0-9]{1,3}[smhd]$"}
EXPIRES: dict[str, Any] = {  # 1 minute .. 30 days
    "pattern": "^([1-9][0-9]{0,3}m|([1-9]|[1-5][0-9]{1,2}|6[0-9]{2}|7[01][0-9]|720)h"
               "|([1-9]|[12][0-9]|30)d)$"}
UUID: dict[str, Any] = {"format": "uuid", "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-"
                        "[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"}
BASE_URL: dict[str, Any] = {  # what outbox.admin.portal.mint_link takes
    "pattern": "^https?://[A-Za-z0-9]([A-Za-z0-9.-]{0,60}[A-Za-z0-9])?(:[1-9][0-9]{0,3})?"
               "(/[A-Za-z0-9._~-]+)*/?$"}
TYPE: dict[str, Any] = {"minLength": 1, "pattern": "^[A-Za-z0-9][A-Za-z0-9._:/-]*$"}
TENANT: dict[str, Any] = {"minLength": 1, "maxLength": 128,
                          "pattern": TEXT_PATTERN}
WHEN: dict[str, Any] = {
    "pattern": "^([1-9][0-9]{0,2}[smhd]|(19[7-9][0-9]|20[0-9]{2})-(0[1-9]|1[0-2])-"
        "(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z)$",
    "description": "a time ago (90s, 30m, 2h, 7d) or an ISO 8601 time after 1970"}


FILTER_HELP = ("Payload filter: deliver only events whose payload matches (docs: "
               "guides/filters.md), e.g. {\"amount\": {\"$gte\": 100}}")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PortalEndpointIn(EndpointCredentials, OAuth2Fields):
    """A customer's new endpoint (its tenant is the portal session's); the credentials
    (:class:`~outbox.admin.endpoint_options.EndpointCredentials`) and the ``oauth2_*``
    fields (:class:`~outbox.admin.endpoint_oauth2.OAuth2Fields`) are write-only where
    secret: no answer shows them."""

    url: str = Field(max_length=URL_MAX_LENGTH)
    event_types: _Types = Field(default=None, max_length=100)
    headers: _Headers = None
    description: str = Field(default="", max_length=DESCRIPTION_MAX_LENGTH)
    secret: str | None = Field(default=None, max_length=200)
    # hmac: v1 signatures, a whsec_ secret; ed25519: v1a, a key pair (the public key is
    # in the answer, the secret key never: docs/guides/signatures.md)
    signature: Signature = "hmac"
    filter: dict[str, Any] | None = Field(default=None, description=FILTER_HELP)


def options_of(body: BaseModel) -> EndpointOptions:
    """The :class:`~outbox.admin.endpoint_options.EndpointOptions` fields of a request body."""
    return EndpointOptions(**body.model_dump(include=set(EndpointOptions.model_fields)))


def credentials_of(body: BaseModel) -> CredentialChanges:
    """The credential fields of a request body (validated already: as the body's model)."""
    return CredentialChanges.model_construct(**{
        k: v for k, v in body.model_dump(include=set(CredentialChanges.model_fields)).items()
        if v is not None})


def oauth2_of(body: BaseModel) -> OAuth2Options:
    """The :class:`~outbox.admin.endpoint_oauth2.OAuth2Options` fields of a request body."""
    return OAuth2Options(**body.model_dump(include=set(OAuth2Options.model_fields)))


class EndpointIn(PortalEndpointIn, EndpointOptions):
    """``POST /api/endpoints``: as ``outbox endpoints add`` (the delivery options are
    :class:`~outbox.admin.endpoint_options.EndpointOptions`'s, ranges included)."""

    tenant: str | None = Field(default=None, json_schema_extra=TENANT)
    all_tenants: bool = False
    # requests per second across every worker, and how many at once above that
    rate_limit: _RateLimit = None
    rate_burst: _RateBurst = None


class PortalEndpointPatch(CredentialChanges, OAuth2Fields):
    """A customer's change to its endpoint; absent fields keep their value; the
    credentials are replaced (secret headers merged, as ``headers``) or cleared;
    ``clear_oauth2`` removes OAuth2 (``oauth2_scope: ""`` only the scope)."""

    url: str | None = Field(default=None, max_length=URL_MAX_LENGTH)
    event_types: _Types = Field(default=None, max_length=100)
    all_event_types: bool = False
    headers: _Headers = None
    clear_headers: bool = False
    description: str | None = Field(default=None, max_length=DESCRIPTION_MAX_LENGTH)
    # requests per second (the portal: the tenant's own, at most the operator's)
    rate_limit: _RateLimit = None
    clear_rate_limit: bool = False
    clear_oauth2: bool = False
    # absent: kept; null: removed (filter_change)
    filter: dict[str, Any] | None = Field(default=None, description=FILTER_HELP)


def filter_change(body: PortalEndpointPatch) -> dict[str, Any]:
    """``update``'s filter arguments of a PATCH body: absent keeps, null removes."""
    if "filter" not in body.model_fields_set:
        return {}
    return {"filter": body.filter} if body.filter is not None else {"clear_filter": True}


class EndpointPatch(PortalEndpointPatch, EndpointOptions):
    """``PATCH /api/endpoints/{id}``: as ``outbox endpoints update``."""

    rate_burst: _RateBurst = None


class DisableIn(Strict):
    reason: str = Field(default="manual", max_length=500)


class RotateIn(Strict):
    """``grace``: how long the old secret keeps signing (``24h``, ``0s``...)."""

    grace: str = Field(default="24h", max_length=32, json_schema_extra=DURATION)
    force: bool = False


class ReplayIn(Strict):
    """``POST /api/dead/replay``: the selectors of ``outbox replay``. Without ``confirm``
    it is a dry run: what would be replayed, nothing changed."""

    ids: list[DeliveryId] = Field(default_factory=list, max_length=10000)
    endpoint: str | None = Field(default=None, max_length=64, json_schema_extra=UUID)
    event_type: str | None = Field(default=None, max_length=128, json_schema_extra=TYPE)
    since: str | None = Field(default=None, max_length=64, json_schema_extra=WHEN)
    until: str | None = Field(default=None, max_length=64, json_schema_extra=WHEN)
    tenant: str | None = Field(default=None, json_schema_extra=TENANT)
    all: bool = False
    enable_endpoints: bool = False
    confirm: bool = False


class SkipIn(Strict):
    """``POST /api/dead/skip``: dead heads of ordered keys to give up on (``outbox dead
    skip``); ``tenant`` refuses ids of other tenants' events."""

    ids: list[DeliveryId] = Field(min_length=1, max_length=1000)
    tenant: str | None = Field(default=None, json_schema_extra=TENANT)


class PortalLinkIn(Strict):
    """``POST /api/portal-links``: a link to ``tenant``'s portal, valid for ``expires``;
    ``base_url`` defaults to ``OUTBOX_PUBLIC_URL``; without either it is refused (422)."""

    tenant: str = Field(json_schema_extra=TENANT)
    expires: str = Field(default="1h", max_length=32, json_schema_extra=EXPIRES)
    base_url: str | None = Field(default=None, max_length=2048, json_schema_extra=BASE_URL)


class PortalSkipIn(Strict):
    ids: list[DeliveryId] = Field(min_length=1, max_length=1000)


class PortalReplayIn(Strict):
    """``POST /api/portal/replay``: the customer's own dead deliveries (``ids``, or those
    of one of its ``endpoint``s, or all since ``since``); dry run unless ``confirm``."""

    ids: list[DeliveryId] = Field(default_factory=list, max_length=1000)
    endpoint: str | None = Field(default=None, max_length=64, json_schema_extra=UUID)
    since: str | None = Field(default=None, max_length=64, json_schema_extra=WHEN)
    all: bool = False
    confirm: bool = False


OptionalDisable = Annotated[DisableIn | None, Body()]
OptionalRotate = Annotated[RotateIn | None, Body()]


# An event type's name, as emit's grammar has it (outbox._emit.event.check_type).
TYPE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
TypeName = Annotated[str, Path(max_length=128, pattern=TYPE_NAME_PATTERN)]
_Tenants = list[Annotated[str, Field(json_schema_extra=TENANT)]] | None


class EventTypeIn(Strict):
    """``POST /api/types``: as ``outbox types add``. ``schema``: a JSON Schema (draft
    2020-12) object; ``tenants``: whom the portal offers it to (null: every tenant)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(max_length=128, pattern=TYPE_NAME_PATTERN)
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = Field(default=None, max_length=2000, pattern="^[^\x00]*$")
    example: Any = None
    tenants: _Tenants = Field(default=None, max_length=1000)


class EventTypePatch(Strict):
    """``PATCH /api/types/{name}``: absent fields keep their value; ``"schema": null``
    drops the schema, ``"tenants": null`` offers the type to every tenant."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = Field(default=None, max_length=2000, pattern="^[^\x00]*$")
    example: Any = None
    deprecated: bool | None = None
    tenants: _Tenants = Field(default=None, max_length=1000)
