"""Re-sealing stored signing secrets with the current ``OUTBOX_SECRET_KEY``.

Guarantees of :func:`reencrypt`:

- All endpoints or none: one transaction (a savepoint inside the caller's transaction),
  with every endpoint row locked for its duration.
- Afterwards every stored secret (current and rotated-out, a broker URL's
  credentials, each secret header's value, the auth secret, the TLS client certificate
  and its key, an OAuth2 client secret) is sealed with the first key
  of the box; plain (never encrypted) secrets are encrypted.
- Refused with :class:`~outbox.errors.ConfigurationError`, changing nothing, when the box
  has no key: it never decrypts stored secrets to plain text.
- A stored value no key of the box opens raises :class:`~outbox.errors.ConfigurationError`
  and changes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._security.secretbox import SecretBox
from outbox.errors import ConfigurationError
from outbox.settings import get_settings

__all__ = [
    "reencrypt",
]


@dataclass(frozen=True, slots=True)
class _Stored:
    id: uuid.UUID
    secret: str
    previous_secret: str | None
    url_credentials: str | None
    secret_header_values: dict[str, str]
    auth_secret: str | None
    tls_client_cert: str | None
    tls_client_key: str | None
    oauth2_client_secret: str | None

    def resealed(self, box: SecretBox) -> tuple[Any, ...]:
        """ENDPOINT_SET_SECRETS' parameters: every sealed value re-sealed by ``box``."""
        def again(value: str | None) -> str | None:
            return box.reseal(value) if value else None

        return (box.reseal(self.secret), again(self.previous_secret),
                again(self.url_credentials),
                Jsonb({k: box.reseal(v) for k, v in self.secret_header_values.items()}),
                again(self.auth_secret), again(self.tls_client_cert),
                again(self.tls_client_key), again(self.oauth2_client_secret), self.id)


def reencrypt(conn: psycopg.Connection[Any], *, schema: str,
              box: SecretBox | None = None) -> int:
    """Re-seal every endpoint's stored secrets with the first key of ``box`` (default: the
    configured ``OUTBOX_SECRET_KEY``); the number of endpoints re-sealed."""
    box = box if box is not None else get_settings().secret_box()
    if not box.encrypting:
        raise ConfigurationError("OUTBOX_SECRET_KEY is empty: nothing to encrypt with")
    with translated(), conn.transaction():
        with conn.cursor(row_factory=class_row(_Stored)) as cur:
            rows = cur.execute(render(queries.ENDPOINT_SECRETS_FOR_UPDATE, schema)).fetchall()
        resealed = [r.resealed(box) for r in rows]
        with conn.cursor() as cur:
            cur.executemany(render(queries.ENDPOINT_SET_SECRETS, schema), resealed)
    return len(rows)
