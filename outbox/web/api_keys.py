"""``GET /api/public-keys/{endpoint_id}``: an ed25519 endpoint's ``whpk_`` public keys, for
the receiver itself, without credentials (docs/guides/signatures.md).

Why without credentials: the party that verifies ``v1a`` signatures is the receiver, which
holds no operator token and, being a service, no portal session; a public key is public by
design (it only verifies). The endpoint's id (a random UUID, never guessable) names it.
Guarantees: the answer holds public keys and nothing else (never a secret, a URL, a tenant
or a header); an id that does not exist and an hmac endpoint answer the same 404, so the
route tells nothing about endpoints that have no public key; nothing is written. The
operator's ``GET /api/endpoints/{id}/public-keys`` and the portal's
``GET /api/portal/endpoints/{id}/public-keys`` answer the same document.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from outbox.admin import endpoints as ep
from outbox.errors import EndpointNotFound
from outbox.web.deps import AppSettings, Conn, plain

router = APIRouter(tags=["public keys"])


def keys_json(endpoint: ep.Endpoint) -> dict[str, Any]:
    """The public-keys document of ``endpoint``: its scheme and the keys that verify its
    deliveries now (current first; the previous one with its ``expires_at``)."""
    return {"endpoint_id": str(endpoint.id), "signature": endpoint.signature,
            "keys": [{"public_key": k.key, "expires_at": plain(k.expires_at)}
                     for k in ep.public_keys(endpoint)]}


@router.get("/public-keys/{endpoint_id}")
def public_keys(endpoint_id: str, conn: Conn, settings: AppSettings) -> dict[str, Any]:
    """The ``whpk_`` keys that verify ``v1a`` signatures of deliveries to this endpoint now;
    404 for an id that does not exist or is not an ed25519 endpoint. No credentials."""
    try:
        endpoint = ep.get(conn, endpoint_id, schema=settings.schema_name)
    except EndpointNotFound:
        endpoint = None
    if endpoint is None or not endpoint.public_key:
        raise EndpointNotFound(f"no public keys for endpoint {endpoint_id}")
    return keys_json(endpoint)
