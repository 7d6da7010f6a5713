"""An endpoint's signing key by its signature scheme (``hmac`` or ``ed25519``), and the
public keys receivers of an ed25519 endpoint verify with (docs/guides/signatures.md).

The secret half is what :mod:`outbox.admin.endpoints` seals into ``endpoints.secret``:
a ``whsec_`` secret for hmac, a ``whsk_`` Ed25519 secret key for ed25519 (the sender
signs ``v1`` or ``v1a`` by its prefix, :mod:`outbox.signing`). A ``whsk_`` key is never
returned to a caller: only its ``whpk_`` public key is, which is public by design.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from outbox.admin._endpoint_types import Endpoint
from outbox.admin.endpoint_options import SIGNATURES
from outbox.errors import InvalidEndpoint
from outbox.signing import (
    SECRET_KEY_PREFIX,
    decode_secret,
    generate_key_pair,
    generate_secret,
    public_key_of,
)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """``secret``: what is sealed and signs; ``public_key``: ed25519 only; ``shown``: the
    secret the caller may see once (a generated hmac secret), else None."""

    secret: str
    public_key: str | None
    shown: str | None


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A ``whpk_`` key that verifies deliveries to an endpoint now; ``expires_at``: when it
    stops signing (the previous key during a rotation's grace), None for the current one."""

    key: str
    expires_at: dt.datetime | None


def check_signature(signature: str) -> str:
    """``signature`` if it is a known scheme, else :class:`InvalidEndpoint`."""
    if signature not in SIGNATURES:
        raise InvalidEndpoint(f"signature must be one of {', '.join(SIGNATURES)},"
                              f" not {signature!r}")
    return signature


def signing_key(signature: str, secret: str | None) -> SigningKey:
    """A new signing key of scheme ``signature``: ``secret`` if given (a ``whsec_``
    secret for hmac, a ``whsk_`` secret key for ed25519), else a generated one. A secret
    of the other scheme is refused with :class:`InvalidEndpoint`, naming the scheme, never
    the secret."""
    check_signature(signature)
    is_key = isinstance(secret, str) and secret.startswith(SECRET_KEY_PREFIX)
    if signature == "ed25519":
        if secret is not None and not is_key:
            raise InvalidEndpoint(f"an ed25519 endpoint's secret is a {SECRET_KEY_PREFIX}"
                                  " Ed25519 secret key (or none: one is generated)")
        key, public = generate_key_pair() if secret is None else (secret, public_key_of(secret))
        return SigningKey(key, public, None)
    if is_key:
        raise InvalidEndpoint(f"a {SECRET_KEY_PREFIX} secret key needs signature ed25519")
    the_secret = generate_secret() if secret is None else secret
    decode_secret(the_secret)
    return SigningKey(the_secret, None, the_secret if secret is None else None)


def public_keys(endpoint: Endpoint) -> list[PublicKey]:
    """The public keys that verify deliveries to ``endpoint`` now: the current one, then
    the previous one while its rotation's grace runs. Empty for an hmac endpoint."""
    keys = [PublicKey(endpoint.public_key, None)] if endpoint.public_key else []
    if endpoint.previous_public_key:
        keys.append(PublicKey(endpoint.previous_public_key, endpoint.previous_secret_expires_at))
    return keys
