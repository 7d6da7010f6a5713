"""Endpoints: where deliveries go, how they are signed, which events they receive.

Every function validates its input before any SQL and raises
:class:`~outbox.errors.InvalidEndpoint` (nothing written) or
:class:`~outbox.errors.EndpointNotFound`. ``add`` and ``update`` given ``allow_networks``
also resolve the URL's host once and refuse it if any address is not public and not inside
those networks (the SSRF guard of :mod:`outbox._security.ssrf`; delivery checks again per
connection); a host that does not resolve now is only a warning in the result, because
DNS can be fixed after registration. Functions run on the caller's connection: in
autocommit mode each call commits on its own; inside a transaction it commits with it.
New and re-enabled endpoints receive events emitted after their commit, never earlier ones.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import new_id
from outbox._security.secretbox import SecretBox
from outbox._security.ssrf import IPNetwork
from outbox.admin import _endpoint_auth as auth
from outbox.admin._endpoint_auth import DeliveryCredentials
from outbox.admin._endpoint_checks import (
    DESCRIPTION_MAX_LENGTH,
    URL_MAX_LENGTH,
    check_destination,
    parse_id,
    positive,
    rate_params,
    shared_params,
    split_url,
    validate_headers,
    validate_text,
    validate_url,
)
from outbox.admin._endpoint_rows import ENDPOINT_ROW, get, one, update_oauth2
from outbox.admin._endpoint_secrets import (
    box_of,
    delivery_credentials,
    signing_secrets,
    url_credentials,
)
from outbox.admin._endpoint_types import Created, Endpoint, Rotated, Updated
from outbox.admin._routing import validate_scope
from outbox.admin._signature_keys import PublicKey, public_keys, signing_key
from outbox.admin.endpoint_oauth2 import OAuth2Options, oauth2_params
from outbox.admin.endpoint_options import EndpointCredentials, EndpointOptions
from outbox.admin.filters import filter_params
from outbox.errors import EndpointNotFound, InvalidEndpoint, OperationRefused

__all__ = [
    "ACTORS",
    "DESCRIPTION_MAX_LENGTH",
    "URL_MAX_LENGTH",
    "Created",
    "DeliveryCredentials",
    "Endpoint",
    "PublicKey",
    "Rotated",
    "Updated",
    "add",
    "check_destination",
    "delivery_credentials",
    "get",
    "list_all",
    "parse_id",
    "public_keys",
    "rotate_secret",
    "set_enabled",
    "set_tenant_rate_limit",
    "signing_secrets",
    "update",
    "url_credentials",
    "validate_headers",
    "validate_text",
    "validate_url",
]

#: Who may enable or disable an endpoint (``data.by`` of the operational event).
ACTORS = ("operator", "tenant")


def add(
    conn: psycopg.Connection[Any],
    url: str,
    *,
    schema: str,
    event_types: Sequence[str] | None = None,
    tenant: str | None = None,
    all_tenants: bool = False,
    secret: str | None = None,
    headers: Mapping[str, str] | None = None,
    description: str = "",
    max_attempts: int | None = None,
    retry_base_seconds: float | None = None,
    retry_cap_seconds: float | None = None,
    timeout_seconds: float | None = None,
    max_in_flight: int | None = None,
    ordered: bool = False,
    rate_limit: float | None = None,
    rate_burst: int | None = None,
    allow_networks: Sequence[IPNetwork] | None = None,
    box: SecretBox | None = None,
    allow_brokers: bool = True,
    options: EndpointOptions | None = None,
    credentials: EndpointCredentials | None = None,
    oauth2: OAuth2Options | None = None,
    signature: str = "hmac",
    filter: Mapping[str, Any] | str | None = None,
) -> Created:
    """Register an endpoint. Without ``secret`` one is generated and returned once.

    ``tenant`` scopes it to that tenant's events; ``all_tenants`` opts it in to every
    tenant's (and tenant-less) events; neither: tenant-less (:mod:`outbox.admin._routing`).
    ``event_types`` are exact types, ``'prefix.*'`` patterns or ``'*'``; none: every type.
    ``ordered``: deliveries of events that share a ``key`` go out one at a time, each after
    the previous one is recorded delivered (docs/guides/ordering.md).
    ``rate_limit``: requests per second to this endpoint across every worker process and
    host, with at most ``rate_burst`` (default: ``rate_limit``) at once above it.

    With ``allow_networks`` the URL also passes :func:`check_destination` first
    (``None``, the library default, skips that check; the CLI always passes it).
    The secret is stored sealed by ``box`` (default: ``OUTBOX_SECRET_KEY``'s).
    A broker URL's credentials are sealed the same way and left out of the stored ``url``
    (never shown again); ``allow_brokers=False`` (the portal) refuses broker URLs.
    The delivery options (``max_attempts`` ... ``max_in_flight``) may also come as
    ``options``; keyword arguments given win. Their ranges: :mod:`outbox.admin.endpoint_options`.
    ``credentials``: secret headers, auth, a TLS client certificate, sealed by ``box`` and
    never returned (:mod:`outbox.admin._endpoint_auth` says what each must be).
    ``oauth2``: OAuth2 client credentials (all three or none; the client secret sealed by
    ``box``; the token URL checked against ``allow_networks`` too):
    :mod:`outbox.admin.endpoint_oauth2`. One auth scheme per endpoint: basic, bearer or
    OAuth2.
    ``signature``: ``hmac`` (default) or ``ed25519``: a key pair is generated (or ``secret``
    is its ``whsk_`` secret key), the secret key sealed as a secret is and never returned;
    the ``whpk_`` public key is ``endpoint.public_key`` (docs/guides/signatures.md).
    ``filter``: a payload filter (a JSON object or its text, :mod:`outbox.admin.filters`):
    the endpoint receives only the events of its types whose payload matches.
    """
    validate_url(url, allow_brokers=allow_brokers)
    stored_url, url_secret = split_url(url)
    params = {
        "id": new_id(), "url": stored_url,
        "description": validate_text("description", description,
                                     max_length=DESCRIPTION_MAX_LENGTH),
        "tenant": validate_scope(tenant, all_tenants), "all_tenants": bool(all_tenants),
        **shared_params(event_types, headers, ordered, options, max_attempts=max_attempts,
                        retry_base_seconds=retry_base_seconds,
                        retry_cap_seconds=retry_cap_seconds,
                        timeout_seconds=timeout_seconds, max_in_flight=max_in_flight),
        **rate_params(rate_limit, rate_burst),
        **auth.credential_params(credentials, box_of(box)),
        **filter_params(filter),
    }
    auth.check_change(conn, "", None, params, url)
    key = signing_key(signature, secret)
    params.update(secret=box_of(box).seal(key.secret), signature=signature,
                  public_key=key.public_key)
    params["url_credentials"] = box_of(box).seal(url_secret) if url_secret else None
    oauth, auth_warnings = oauth2_params(oauth2, box=box_of(box), url=url, headers=headers,
                                         allow_networks=allow_networks)
    params.update(oauth)
    auth.one_scheme(params["auth_kind"], params["oauth2_token_url"])
    warnings = () if allow_networks is None else check_destination(stored_url, allow_networks)
    row = one(conn, queries.ENDPOINT_INSERT, schema, params)
    assert row is not None
    return Created(row, key.shown, warnings + auth_warnings)


def list_all(conn: psycopg.Connection[Any], *, schema: str, tenant: str | None = None
             ) -> list[Endpoint]:
    """Every endpoint, oldest first; with ``tenant``, only that tenant's (not the
    all-tenants ones)."""
    validate_scope(tenant, all_tenants=False)
    with translated(), conn.cursor(row_factory=ENDPOINT_ROW) as cur:
        if tenant is None:
            cur.execute(render(queries.ENDPOINT_LIST, schema))
        else:
            cur.execute(render(queries.ENDPOINT_LIST_TENANT, schema), (tenant,))
        return cur.fetchall()


def set_enabled(
    conn: psycopg.Connection[Any],
    endpoint_id: str | uuid.UUID,
    enabled: bool,
    *,
    schema: str,
    reason: str | None = None,
    actor: str = "operator",
) -> Endpoint:
    """Enable or disable an endpoint. Disabled endpoints get no new deliveries and
    workers do not send their pending ones until re-enabled.

    A change of state emits ``outbox.endpoint.disabled`` or ``outbox.endpoint.enabled``
    (``data.by`` is ``actor``: ``operator`` or ``tenant``) in the same statement, so it
    commits with the change; setting the state the endpoint already has emits nothing."""
    eid = parse_id(endpoint_id)
    validate_text("reason", reason, max_length=500)
    if actor not in ACTORS:
        raise InvalidEndpoint(f"actor must be one of {', '.join(ACTORS)}, not {actor!r}")
    params = {"id": eid, "enabled": enabled, "reason": None if enabled else (reason or "manual"),
              "actor": actor}
    row = one(conn, queries.ENDPOINT_SET_ENABLED, schema, params)
    if row is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return row


def update(
    conn: psycopg.Connection[Any],
    endpoint_id: str | uuid.UUID,
    *,
    schema: str,
    url: str | None = None,
    event_types: Sequence[str] | None = None,
    all_event_types: bool = False,
    headers: Mapping[str, str] | None = None,
    clear_headers: bool = False,
    description: str | None = None,
    max_attempts: int | None = None,
    retry_base_seconds: float | None = None,
    retry_cap_seconds: float | None = None,
    timeout_seconds: float | None = None,
    max_in_flight: int | None = None,
    ordered: bool | None = None,
    rate_limit: float | None = None,
    rate_burst: int | None = None,
    clear_rate_limit: bool = False,
    allow_networks: Sequence[IPNetwork] | None = None,
    box: SecretBox | None = None,
    allow_brokers: bool = True,
    options: EndpointOptions | None = None,
    credentials: EndpointCredentials | None = None,
    oauth2: OAuth2Options | None = None,
    clear_oauth2: bool = False,
    filter: Mapping[str, Any] | str | None = None,
    clear_filter: bool = False,
) -> Updated:
    """Change an endpoint in one statement; ``None`` leaves a field as it is.

    Validated exactly like :func:`add` (same errors, nothing written on refusal).
    ``event_types`` replaces the filter, ``all_event_types`` removes it; either applies to
    events emitted after the commit. ``headers`` are merged into the existing ones, after
    dropping those if ``clear_headers``. A new ``url`` also applies to pending deliveries.
    ``ordered`` applies to events emitted after the commit: turned on, a key's events
    emitted earlier are not ordered with the later ones; turned off, the deliveries already
    queued behind a key's head still go one at a time, in order.
    A new broker ``url`` replaces the stored credentials with its own (none if it has none).
    ``rate_limit`` / ``rate_burst`` apply to the next claims of every worker;
    ``clear_rate_limit`` removes both (the adaptive throttling still applies). ``options``: as for
    :func:`add` (its unset fields are unchanged). ``credentials``: as for :func:`add`;
    secret headers merge like ``headers`` (a
    :class:`~outbox.admin.endpoint_options.CredentialChanges` may clear them first), a new
    auth replaces the old one, a new certificate the old one; the checks that involve the
    current headers and auth run on the row locked until this update commits.
    ``oauth2``: as for :func:`add`, except that an endpoint with OAuth2 may change any of
    its options alone (``oauth2_scope=""`` removes the scope); ``clear_oauth2`` removes
    OAuth2. Switching between basic/bearer and OAuth2 needs the old one cleared
    (``clear_auth`` / ``clear_oauth2``) in the same update.
    ``filter`` replaces the payload filter, ``clear_filter`` removes it; either applies to
    events emitted after the commit.
    """
    eid = parse_id(endpoint_id)
    if clear_rate_limit and (rate_limit is not None or rate_burst is not None):
        raise InvalidEndpoint("give a rate limit or clear_rate_limit, not both")
    if event_types and all_event_types:
        raise InvalidEndpoint("give event types or all_event_types, not both")
    url_secret: str | None = None
    if url is not None:
        validate_url(url, allow_brokers=allow_brokers)
        url, url_secret = split_url(url)
    params = {
        "id": eid, "url": url,
        "url_credentials": box_of(box).seal(url_secret) if url_secret else None,
        "description": validate_text("description", description,
                                     max_length=DESCRIPTION_MAX_LENGTH),
        "set_types": bool(event_types) or all_event_types, "clear_headers": clear_headers,
        **shared_params(event_types, headers, ordered, options, max_attempts=max_attempts,
                        retry_base_seconds=retry_base_seconds,
                        retry_cap_seconds=retry_cap_seconds,
                        timeout_seconds=timeout_seconds, max_in_flight=max_in_flight),
        **rate_params(rate_limit, rate_burst, has_rate=rate_limit is None and (
            rate_burst is None or get(conn, eid, schema=schema).rate_limit is not None)),
        "clear_rate_limit": bool(clear_rate_limit),
        **auth.credential_params(credentials, box_of(box)),
        **filter_params(filter, clear_filter),
    }
    oauth, warnings = update_oauth2(conn, eid, schema, oauth2, clear_oauth2, url=url,
                                     headers=None if headers is None else params["headers"].obj,
                                     clear_headers=clear_headers, box=box,
                                     allow_networks=allow_networks)
    params.update(oauth)
    if url is not None and allow_networks is not None:
        warnings += check_destination(url, allow_networks)
    # the checked row stays locked until the update commits: in autocommit mode this block's
    # transaction; else the caller's (which commits or rolls back the update as before)
    with conn.transaction() if conn.autocommit else contextlib.nullcontext():
        auth.check_change(conn, schema, eid, params, url)
        if params["set_auth"] or params["oauth2_token_url"] is not None:
            now = get(conn, eid, schema=schema)
            auth.one_scheme(params["auth_kind"] if params["set_auth"] else now.auth_kind,
                        None if params["oauth2_clear"]
                        else params["oauth2_token_url"] or now.oauth2_token_url)
        row = one(conn, queries.ENDPOINT_UPDATE, schema, params)
    if row is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return Updated(row, warnings)


def set_tenant_rate_limit(
    conn: psycopg.Connection[Any],
    endpoint_id: str | uuid.UUID,
    rate_limit: float | None,
    *,
    tenant: str,
    schema: str,
) -> Endpoint:
    """The tenant's own rate limit of its endpoint (requests per second; None removes it):
    it may lower the operator's ``rate_limit``, never raise it (refused with
    :class:`InvalidEndpoint`, nothing written). An endpoint of another tenant, or of every
    tenant, is :class:`EndpointNotFound`, as if absent."""
    validate_scope(tenant, all_tenants=False)
    limit = positive("rate_limit", rate_limit)
    current = get(conn, endpoint_id, schema=schema)
    if current.tenant != tenant or current.all_tenants:
        raise EndpointNotFound(f"no endpoint {endpoint_id}")
    if limit is not None and current.rate_limit is not None and limit > current.rate_limit:
        raise InvalidEndpoint(f"rate_limit {limit:g}/s is above this endpoint's limit of "
                              f"{current.rate_limit:g}/s")
    params = {"id": current.id, "tenant": tenant, "limit": limit}
    row = one(conn, queries.ENDPOINT_SET_TENANT_RATE_LIMIT, schema, params)
    if row is None:  # the operator lowered its limit meanwhile
        raise InvalidEndpoint("rate_limit is above this endpoint's limit")
    return row


def rotate_secret(
    conn: psycopg.Connection[Any],
    endpoint_id: str | uuid.UUID,
    *,
    schema: str,
    grace: dt.timedelta,
    secret: str | None = None,
    force: bool = False,
    box: SecretBox | None = None,
) -> Rotated:
    """Give the endpoint a new signing secret (generated unless ``secret`` is given).

    The old secret keeps signing beside the new one (two ``v1,`` entries) for ``grace``,
    and likewise for an ed25519 endpoint: a new key pair (two ``v1a,`` entries), its
    secret key never returned (``Rotated.secret`` is None; the new public key is
    ``endpoint.public_key``, the old one ``endpoint.previous_public_key``),
    so the receiver can switch at any moment in that window; after it, only the new one
    signs. Refused with :class:`~outbox.errors.OperationRefused`, changing nothing, while
    a previous rotation's grace period is running (a third secret would be dropped early),
    unless ``force``.
    """
    eid = parse_id(endpoint_id)
    if grace < dt.timedelta(0):
        raise InvalidEndpoint(f"grace must not be negative, got {grace}")
    current = get(conn, eid, schema=schema)
    key = signing_key(current.signature, secret)
    params = {"id": eid, "grace": grace.total_seconds(), "secret": box_of(box).seal(key.secret),
              "force": force, "signature": current.signature, "public_key": key.public_key}
    row = one(conn, queries.ENDPOINT_ROTATE_SECRET, schema, params)
    if row is None:
        until = current.previous_secret_expires_at
        when = until.isoformat(timespec="seconds") if until else "its expiry"
        raise OperationRefused(
            f"endpoint {eid} is still in a rotation: its previous secret signs until {when};"
            " rotating again now would stop it early (wait, or use --force)"
        )
    return Rotated(row, None if key.public_key else key.secret)
