"""Signing secrets at rest: encrypted with Fernet when ``OUTBOX_SECRET_KEY`` is set.

``OUTBOX_SECRET_KEY`` is a comma-separated list of Fernet keys (``outbox secrets
generate-key`` makes one). The first key encrypts; every key decrypts, so a key rotation
is: put the new key first, keep the old one after it, run ``outbox secrets reencrypt``,
then drop the old key.

Guarantees:

- With a key set, every secret outbox writes is stored as ``enc:v1:<Fernet token>``
  (AES-128-CBC + HMAC-SHA256, authenticated: a tampered value fails to open).
- Values stored before encryption was turned on (plain ``whsec_...``) keep working and
  are encrypted by ``outbox secrets reencrypt``.
- An encrypted value without a key that opens it raises :class:`ConfigurationError`
  naming the setting, never the secret.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from outbox.errors import ConfigurationError

PREFIX = "enc:v1:"


_OPENED_MAX = 10_000


def generate_key() -> str:
    """A new random Fernet key (32 bytes, urlsafe base64)."""
    return Fernet.generate_key().decode()


class SecretBox:
    """Seal and open stored secrets with the configured keys (or pass them through)."""

    def __init__(self, keys: str = "") -> None:
        parts = [k.strip() for k in keys.split(",") if k.strip()]
        try:
            self._fernet = MultiFernet([Fernet(k) for k in parts]) if parts else None
        except (ValueError, TypeError):
            raise ConfigurationError(
                "OUTBOX_SECRET_KEY must be comma-separated Fernet keys"
                " (make one with `outbox secrets generate-key`)"
            ) from None
        # stored value -> secret: a claim opens every job's secret, and a decryption costs
        # ~12 us (a few percent of a delivery); a stored value always opens the same way
        self._opened: dict[str, str] = {}

    @property
    def encrypting(self) -> bool:
        return self._fernet is not None

    def seal(self, secret: str) -> str:
        """The value to store for ``secret``."""
        if self._fernet is None:
            return secret
        return PREFIX + self._fernet.encrypt(secret.encode()).decode()

    def open(self, stored: str) -> str:
        """The secret behind a stored value."""
        if not stored.startswith(PREFIX):
            return stored
        if self._fernet is None:
            raise ConfigurationError(
                "endpoint secrets are encrypted: set OUTBOX_SECRET_KEY to the key that"
                " encrypted them")
        secret = self._opened.get(stored)
        if secret is not None:
            return secret
        try:
            secret = self._fernet.decrypt(stored[len(PREFIX):].encode()).decode()
        except InvalidToken:
            raise ConfigurationError(
                "an endpoint secret does not open with any key in OUTBOX_SECRET_KEY") from None
        if len(self._opened) >= _OPENED_MAX:
            self._opened.clear()
        self._opened[stored] = secret
        return secret

    def reseal(self, stored: str) -> str:
        """``stored`` sealed with the first (current) key; unchanged without keys."""
        return self.seal(self.open(stored))
