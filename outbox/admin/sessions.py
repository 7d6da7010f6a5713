"""Ending web sessions on the server: a signed session cookie cannot be recalled, so
logout records its session id, and :func:`is_revoked` refuses it from then on, however
long the cookie itself would still be valid. Each call runs on the caller's connection
(autocommit: it commits on its own)."""

from __future__ import annotations

from typing import Any

import psycopg

from outbox._db import queries as q
from outbox._db.connection import render, translated

__all__ = ["is_revoked", "revoke"]


def revoke(conn: psycopg.Connection[Any], sid: str, expires_at: int, *, schema: str) -> None:
    """End session ``sid`` (its cookie expires at ``expires_at``, unix seconds); drops the
    records of sessions whose cookies have expired anyway."""
    with translated():
        conn.execute(render(q.SESSION_REVOKE, schema).encode(),
                     {"sid": sid, "exp": expires_at})
        conn.execute(render(q.SESSION_PRUNE, schema).encode())


def is_revoked(conn: psycopg.Connection[Any], sid: str, *, schema: str) -> bool:
    """True if session ``sid`` was ended by a logout."""
    with translated():
        row = conn.execute(render(q.SESSION_REVOKED, schema).encode(), (sid,)).fetchone()
    return bool(row and row[0])
