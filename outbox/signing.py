"""Standard Webhooks signing and verification: ``v1`` (HMAC) and ``v1a`` (Ed25519).

What is signed
    The signed content is ``f"{webhook-id}.{webhook-timestamp}.".encode() + body`` where
    ``webhook-timestamp`` is integer unix seconds and ``body`` is the exact request body
    bytes. A ``whsec_`` secret signs it with ``HMAC-SHA256(key, content)`` (``key``: the
    base64-decoded secret, without the prefix), sent as ``v1,<standard base64>``. A
    ``whsk_`` secret key (an Ed25519 key, :mod:`outbox._security.ed25519`) signs it with
    Ed25519, sent as ``v1a,<standard base64 of the 64-byte signature>``; receivers verify
    that with the ``whpk_`` public key (:func:`verify` given a ``whpk_`` key).

Secrets never appear in error messages
    Every error raised here describes *what* is wrong (not base64, wrong length, stale
    timestamp, no matching signature) and never echoes the secret or any part of it.
    Lower-level exceptions are suppressed (``from None``) so they cannot leak it either.

Rotation
    :func:`signature_header` signs once per secret (or secret key) and joins the ``v1,...``
    / ``v1a,...`` entries with single spaces. A receiver accepts the message if *any* entry
    of its scheme matches its own secret or public key, so sending ``[new, old]`` during
    rotation keeps receivers configured with either secret working until the old one is
    dropped.

Verification
    :func:`verify` accepts exactly what ``standardwebhooks.Webhook(secret).verify`` (1.1)
    accepts and rejects what it rejects, but always raises
    :class:`~outbox.errors.InvalidSignature` where the reference sometimes raises a bare
    ``ValueError`` or ``UnicodeDecodeError``. Inherited quirks, kept for compatibility:

    * only ``webhook-id`` / ``webhook-timestamp`` / ``webhook-signature`` are read (no
      ``svix-*`` aliases); names are case-insensitive and, when a name occurs twice with
      different case, the last one wins;
    * the timestamp is parsed with ``float`` (so ``"1700000000.5"`` or ``" 1700000000 "``
      are accepted) and the signature is checked against its floor;
    * signature entries are read left to right: a malformed entry (no single comma, bad
      base64 padding) before the matching one rejects the message, entries after a match
      are not inspected, and non-alphabet characters inside a v1 signature are ignored;
    * the body must be valid UTF-8.

    Comparison uses :func:`hmac.compare_digest`. A malformed *secret* is a configuration
    error and raises :class:`~outbox.errors.InvalidEndpoint`, not ``InvalidSignature``.

    Given a ``whpk_`` public key, :func:`verify` applies the same header, timestamp and
    body rules and checks the ``v1a`` entries instead (``v1`` entries are skipped, as
    ``v1a`` ones are when verifying with a ``whsec_`` secret); a ``v1a`` entry whose
    base64 is malformed rejects the message as a malformed ``v1`` entry does.
"""

from __future__ import annotations

import base64
import functools
import hmac
import math
import secrets as _secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from outbox._security import ed25519
from outbox.errors import InvalidEndpoint, InvalidSignature

__all__ = [
    "PUBLIC_KEY_PREFIX",
    "SECRET_KEY_PREFIX",
    "SECRET_PREFIX",
    "check_key",
    "decode_secret",
    "generate_key_pair",
    "generate_secret",
    "public_key_of",
    "sign",
    "signature_header",
    "verify",
    "webhook_headers",
]

SECRET_PREFIX = "whsec_"
SECRET_KEY_PREFIX = ed25519.SECRET_KEY_PREFIX  # an Ed25519 secret key: signs v1a
PUBLIC_KEY_PREFIX = ed25519.PUBLIC_KEY_PREFIX  # its public key: verifies v1a

_SECRET_BYTES = 32
_MIN_KEY_BYTES = 24
_MAX_KEY_BYTES = 64
_ID_HEADER = "webhook-id"
_TIMESTAMP_HEADER = "webhook-timestamp"
_SIGNATURE_HEADER = "webhook-signature"


def generate_secret() -> str:
    """Return a new ``whsec_``-prefixed secret holding 32 random bytes (standard base64)."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(_SECRET_BYTES)).decode("ascii")


def generate_key_pair() -> tuple[str, str]:
    """Return a new Ed25519 key pair: (``whsk_`` + base64 of the 32-byte seed, ``whpk_`` +
    base64 of the 32-byte public key)."""
    return ed25519.generate()


def public_key_of(secret_key: str) -> str:
    """Return the ``whpk_`` public key of a ``whsk_`` secret key (InvalidEndpoint if it is
    not one; the message never contains the key)."""
    return ed25519.public_key_of(secret_key)


def check_key(key: str) -> None:
    """Raise :class:`InvalidEndpoint` unless ``key`` is something :func:`verify` takes: a
    ``whsec_`` secret (or its bare base64) or a ``whpk_`` public key. A ``whsk_`` secret
    key is refused: it signs; receivers verify with its public key."""
    if isinstance(key, str) and key.startswith(PUBLIC_KEY_PREFIX):
        ed25519.public_key(key)
        return
    if isinstance(key, str) and key.startswith(SECRET_KEY_PREFIX):
        raise InvalidEndpoint(f"a {SECRET_KEY_PREFIX} secret key signs; verify with its"
                              f" {PUBLIC_KEY_PREFIX} public key")
    decode_secret(key)


def decode_secret(secret: str) -> bytes:
    """Return the HMAC key of ``secret`` (optional ``whsec_`` prefix, standard base64).

    Missing ``=`` padding is tolerated; anything else that is not strict standard base64
    (whitespace, URL-safe ``-``/``_``, non-ASCII) is refused, as is a key shorter than 24
    or longer than 64 bytes. Raises :class:`InvalidEndpoint`; the message never contains
    the secret.
    """
    if not isinstance(secret, str):
        raise InvalidEndpoint("webhook secret must be a str")
    return _decoded(secret)


@functools.lru_cache(maxsize=1024)
def _decoded(secret: str) -> bytes:
    """:func:`decode_secret` of a str, remembered: a worker signs with the same few secrets
    over and over (a refused secret raises, and is not remembered)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except ValueError:
        raise InvalidEndpoint(
            f"webhook secret is not valid standard base64 (after the optional {SECRET_PREFIX}"
            " prefix)"
        ) from None
    if not _MIN_KEY_BYTES <= len(key) <= _MAX_KEY_BYTES:
        raise InvalidEndpoint(
            f"webhook secret must decode to {_MIN_KEY_BYTES}-{_MAX_KEY_BYTES} bytes, got {len(key)}"
        )
    return key


def _digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    # one-shot HMAC (OpenSSL's, when available): faster than hmac.new or copying a keyed
    # hmac object per message
    return hmac.digest(key, f"{msg_id}.{timestamp}.".encode() + body, "sha256")


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Return ``"v1,<base64 HMAC-SHA256>"`` of ``f"{msg_id}.{timestamp}."`` + ``body``, or
    ``"v1a,<base64 Ed25519 signature>"`` of the same content for a ``whsk_`` secret key."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError("timestamp must be integer unix seconds")
    return _entry(secret, f"{msg_id}.{timestamp}.".encode() + body)


def _entry(secret: str, signed: bytes) -> str:
    """One ``webhook-signature`` entry of ``signed`` by ``secret``: v1a for a ``whsk_``
    secret key, v1 (HMAC) otherwise."""
    if isinstance(secret, str) and secret.startswith(SECRET_KEY_PREFIX):
        return "v1a," + base64.b64encode(ed25519.sign(secret, signed)).decode()
    return "v1," + base64.b64encode(hmac.digest(decode_secret(secret), signed, "sha256")).decode()


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the ``webhook-signature`` value: one entry per secret, space-joined (``v1,...``
    for a ``whsec_`` secret, ``v1a,...`` for a ``whsk_`` secret key).

    Pass ``[new, old]`` while rotating so receivers holding either secret verify.
    """
    if isinstance(secrets, str):
        raise TypeError("secrets must be a sequence of secrets, not a single str")
    if not secrets:
        raise InvalidEndpoint("at least one webhook secret is required to sign")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError("timestamp must be integer unix seconds")
    signed = f"{msg_id}.{timestamp}.".encode() + body  # once, whatever the number of secrets
    return " ".join(_entry(secret, signed) for secret in secrets)


def webhook_headers(
    secrets: Sequence[str], msg_id: str, body: bytes, *, timestamp: int | None = None
) -> dict[str, str]:
    """Return the three Standard Webhooks headers for ``body`` (timestamp defaults to now)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        _ID_HEADER: msg_id,
        _TIMESTAMP_HEADER: str(ts),
        _SIGNATURE_HEADER: signature_header(secrets, msg_id, ts, body),
    }


def _body_bytes(body: bytes | str) -> bytes:
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidSignature("webhook body is not encodable as UTF-8") from None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("webhook body is not valid UTF-8") from None
    return body


def _required_headers(headers: Mapping[str, str]) -> tuple[str, str, str]:
    lowered = {key.lower(): value for key, value in headers.items()}
    msg_id = lowered.get(_ID_HEADER)
    timestamp = lowered.get(_TIMESTAMP_HEADER)
    signature = lowered.get(_SIGNATURE_HEADER)
    if not (msg_id and timestamp and signature):
        raise InvalidSignature(
            f"missing or empty {_ID_HEADER}, {_TIMESTAMP_HEADER} or {_SIGNATURE_HEADER} header"
        )
    return msg_id, timestamp, signature


def _checked_timestamp(raw: str, tolerance_seconds: int, now: float | None) -> int:
    """Parse ``raw`` like the reference (float, microsecond datetime) and apply tolerance."""
    try:
        sent_at = datetime.fromtimestamp(float(raw), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        raise InvalidSignature(f"{_TIMESTAMP_HEADER} is not a unix timestamp") from None
    current = datetime.now(tz=UTC) if now is None else datetime.fromtimestamp(now, tz=UTC)
    tolerance = timedelta(seconds=tolerance_seconds)
    if sent_at < current - tolerance:
        raise InvalidSignature(f"{_TIMESTAMP_HEADER} is too old")
    if sent_at > current + tolerance:
        raise InvalidSignature(f"{_TIMESTAMP_HEADER} is too far in the future")
    return math.floor(sent_at.timestamp())


def _candidates(header_value: str, wanted: str) -> Iterator[bytes]:
    """The decoded ``wanted`` (v1 or v1a) signatures of the header, left to right; a
    malformed entry met on the way raises."""
    for entry in header_value.split(" "):
        parts = entry.split(",")
        if len(parts) != 2:
            raise InvalidSignature(f"malformed {_SIGNATURE_HEADER} entry")
        version, encoded = parts
        if version != wanted:
            continue
        try:
            yield base64.b64decode(encoded)
        except ValueError:
            raise InvalidSignature(
                f"malformed {wanted} signature in {_SIGNATURE_HEADER}") from None


def _has_matching_signature(expected: bytes, header_value: str) -> bool:
    return any(hmac.compare_digest(expected, candidate)
               for candidate in _candidates(header_value, "v1"))


def _has_matching_v1a(public_key: str, signed: bytes, header_value: str) -> bool:
    return any(ed25519.valid(public_key, candidate, signed)
               for candidate in _candidates(header_value, "v1a"))


def verify(
    secret: str,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    tolerance_seconds: int = 300,
    now: float | None = None,
) -> None:
    """Verify a received webhook; return ``None`` or raise :class:`InvalidSignature`.

    ``secret``: the endpoint's ``whsec_`` secret (checks ``v1`` entries) or its ``whpk_``
    public key (checks ``v1a`` entries).

    ``headers`` is any mapping (plain dict, starlette/httpx ``Headers``); names are matched
    case-insensitively. The timestamp must lie within ``tolerance_seconds`` of ``now``
    (unix seconds, default: the current time) on either side.
    """
    check_key(secret)
    payload = _body_bytes(body)
    msg_id, raw_timestamp, signatures = _required_headers(headers)
    timestamp = _checked_timestamp(raw_timestamp, tolerance_seconds, now)
    if secret.startswith(PUBLIC_KEY_PREFIX):
        signed = f"{msg_id}.{timestamp}.".encode() + payload
        if not _has_matching_v1a(secret, signed, signatures):
            raise InvalidSignature(f"no matching v1a signature in {_SIGNATURE_HEADER}")
        return
    if not _has_matching_signature(_digest(decode_secret(secret), msg_id, timestamp, payload),
                                   signatures):
        raise InvalidSignature(f"no matching v1 signature in {_SIGNATURE_HEADER}")
