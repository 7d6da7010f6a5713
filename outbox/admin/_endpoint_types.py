"""The endpoint records the operations of :mod:`outbox.admin.endpoints` return (re-exported
there, the public names)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An endpoint as stored, without its secrets (those are never read back)."""

    id: uuid.UUID
    url: str
    description: str
    tenant: str | None  # None: tenant-less, or every tenant if all_tenants
    all_tenants: bool
    event_types: list[str] | None
    headers: dict[str, str]
    enabled: bool
    disabled_reason: str | None
    max_attempts: int | None
    retry_base_seconds: float | None
    retry_cap_seconds: float | None
    timeout_seconds: float | None
    max_in_flight: int | None
    ordered: bool  # deliveries of events sharing a key go one at a time, in order
    previous_secret_expires_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime
    # Flow control (docs/guides/flow-control.md): requests per second across every worker,
    # the burst above it (None: one second's worth), the tenant's own lower limit.
    rate_limit: float | None = None
    rate_burst: int | None = None
    tenant_rate_limit: float | None = None
    # Credentials (docs/guides/endpoint-auth.md), never their values: the secret headers'
    # names, the auth kind (basic, bearer, oauth2), the TLS client certificate's subject and
    # expiry (None: no client certificate).
    secret_headers: list[str] = field(default_factory=list)
    auth_kind: str | None = None
    tls_client_cert_subject: str | None = None
    tls_client_cert_expires_at: dt.datetime | None = None
    # OAuth2 client credentials (outbox.admin.endpoint_oauth2): configured when the token
    # URL is set; the client secret is never read back.
    oauth2_token_url: str | None = None
    oauth2_client_id: str | None = None
    oauth2_scope: str | None = None
    # Signatures (docs/guides/signatures.md): "hmac" (v1, a whsec_ secret) or "ed25519"
    # (v1a): its whpk_ public key, and the previous one while a rotation's grace runs.
    signature: str = "hmac"
    public_key: str | None = None
    previous_public_key: str | None = None
    # Payload filter as registered (outbox.admin.filters); None: every event of its types.
    filter: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Created:
    """``add``'s result; ``secret`` is set only when outbox generated it (shown once), and
    never for an ed25519 endpoint (its public key is ``endpoint.public_key``).
    ``warnings``: e.g. the host did not resolve at registration (see module doc)."""

    endpoint: Endpoint
    secret: str | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Updated:
    """``update``'s result, with registration warnings as for :class:`Created`."""

    endpoint: Endpoint
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rotated:
    """``rotate_secret``'s result: the new secret (shown once) and when the old one stops
    signing (``endpoint.previous_secret_expires_at``). An ed25519 endpoint's new secret key
    is never shown: ``secret`` is None and ``endpoint.public_key`` is the new public key."""

    endpoint: Endpoint
    secret: str | None
