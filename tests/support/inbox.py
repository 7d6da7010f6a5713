"""Helpers for receiving-side tests: a receiver-only database and signed requests."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

import psycopg

from outbox.admin.migrations import migrate
from outbox.signing import webhook_headers
from tests.support.pg import SCHEMA

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

# The receiver's own tables: `effects` counts side effects; `deferred` fails at COMMIT when a
# handler inserts the same n twice (a commit that fails after the handler returned).
RECEIVER_TABLES = """
CREATE TABLE effects (webhook_id text NOT NULL, payload jsonb);
CREATE TABLE deferred (n int UNIQUE DEFERRABLE INITIALLY DEFERRED);
"""


def prepare_receiver_db(url: str) -> str:
    """The inbox series (none of the sender's tables) and the receiver's own tables."""
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c, SCHEMA, inbox=True)
        c.execute(RECEIVER_TABLES.encode())
    return url


def signed(payload: Any = None, *, msg_id: str | None = None, timestamp: int | None = None,
           secret: str = SECRET, raw: bytes | None = None) -> tuple[bytes, dict[str, str]]:
    """A signed request: ``raw`` bytes as given, else ``payload`` as JSON."""
    body = raw if raw is not None else json.dumps(
        {"invoice": 42} if payload is None else payload).encode()
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    return body, webhook_headers([secret], msg_id, body, timestamp=timestamp)


def scalar(url: str, query: str, params: Any = None) -> Any:
    with psycopg.connect(url) as c:
        row = c.execute(query.encode(), params).fetchone()
    assert row is not None
    return row[0]


def written(url: str) -> tuple[int, int]:
    """(inbox ids, effects) committed so far."""
    return (int(scalar(url, f"SELECT count(*) FROM {SCHEMA}.inbox")),
            int(scalar(url, "SELECT count(*) FROM effects")))


def without(headers: Mapping[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != name}


def bad_requests() -> dict[str, tuple[bytes, dict[str, str]]]:
    """Requests every framework helper must answer 400 without writing anything."""
    body, headers = signed()
    stale = signed(timestamp=int(time.time()) - 3600)
    return {
        "bad signature": (body.replace(b"42", b"43"), headers),
        "stale timestamp": stale,
        "missing webhook-id": (body, without(headers, "webhook-id")),
        "missing webhook-signature": (body, without(headers, "webhook-signature")),
        "not JSON": signed(raw=b"invoice=42"),
    }
