"""Ed25519 key pairs in the Standard Webhooks serialization (``v1a`` signatures).

The spec serializes an asymmetric signing key as base64 with a ``whsk_`` prefix and its
public key with ``whpk_`` (the Standard Webhooks specification, "Signature scheme"). Here:

- ``whsk_`` + standard base64 of the 32-byte Ed25519 seed (RFC 8032 private key). It is
  a secret: outbox stores it sealed (:mod:`outbox._security.secretbox`) where the HMAC
  secret would be, and never shows it.
- ``whpk_`` + standard base64 of the 32 raw bytes of the public key (RFC 8032 encoding).

Signatures are plain RFC 8032 Ed25519 (pure, no pre-hash) over the bytes given. Errors
say what is wrong with a key and never echo it. Decoded keys are remembered (a worker
signs with the same few keys over and over); a refused key raises and is not remembered.
"""

from __future__ import annotations

import base64
import functools

from cryptography.exceptions import InvalidSignature as _BadSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from outbox.errors import InvalidEndpoint

SECRET_KEY_PREFIX = "whsk_"
PUBLIC_KEY_PREFIX = "whpk_"
KEY_BYTES = 32
SIGNATURE_BYTES = 64


def _raw(key: str, prefix: str, what: str) -> bytes:
    if not isinstance(key, str) or not key.startswith(prefix):
        raise InvalidEndpoint(f"an ed25519 {what} starts with {prefix}")
    encoded = key[len(prefix):]
    try:
        raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except ValueError:
        raise InvalidEndpoint(
            f"ed25519 {what} is not valid standard base64 after the {prefix} prefix") from None
    if len(raw) != KEY_BYTES:
        raise InvalidEndpoint(f"an ed25519 {what} is {KEY_BYTES} bytes, got {len(raw)}")
    return raw


@functools.lru_cache(maxsize=1024)
def private_key(secret_key: str) -> Ed25519PrivateKey:
    """The signing key of a ``whsk_`` secret key, or :class:`InvalidEndpoint`."""
    return Ed25519PrivateKey.from_private_bytes(_raw(secret_key, SECRET_KEY_PREFIX, "secret key"))


@functools.lru_cache(maxsize=1024)
def public_key(key: str) -> Ed25519PublicKey:
    """The verifying key of a ``whpk_`` public key, or :class:`InvalidEndpoint`."""
    return Ed25519PublicKey.from_public_bytes(_raw(key, PUBLIC_KEY_PREFIX, "public key"))


def _encode(prefix: str, raw: bytes) -> str:
    return prefix + base64.b64encode(raw).decode("ascii")


def public_key_of(secret_key: str) -> str:
    """The ``whpk_`` public key of a ``whsk_`` secret key."""
    raw = private_key(secret_key).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return _encode(PUBLIC_KEY_PREFIX, raw)


def generate() -> tuple[str, str]:
    """A new key pair: (``whsk_`` secret key, ``whpk_`` public key)."""
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    secret = _encode(SECRET_KEY_PREFIX, seed)
    return secret, public_key_of(secret)


def sign(secret_key: str, content: bytes) -> bytes:
    """The 64-byte Ed25519 signature of ``content``."""
    return private_key(secret_key).sign(content)


def valid(key: str, signature: bytes, content: bytes) -> bool:
    """Whether ``signature`` is ``content``'s by the ``whpk_`` public ``key``."""
    if len(signature) != SIGNATURE_BYTES:
        return False
    try:
        public_key(key).verify(signature, content)
    except _BadSignature:
        return False
    return True
