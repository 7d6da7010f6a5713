"""The worker's database connections: a few reusable connections, each statement batch
in a transaction of its own.

Guarantees:

- Nothing of the worker's outlives a transaction on a server connection: every batch of
  statements runs between ``BEGIN ISOLATION LEVEL READ COMMITTED`` and ``COMMIT`` sent in
  one pipeline (one round trip), and the worker issues no session ``SET``, no session
  advisory lock, no ``LISTEN`` on these connections (the wake-up listener and the pruner
  use their own, see :mod:`outbox.delivery.session`). A server connection shared through a
  transaction-mode pooler (PgBouncer) carries nothing of ours to the next client.
- A connection that saw any error is closed, never reused: a dead one (server restart,
  ``pg_terminate_backend``, network), one in a failed transaction, or one on a node that
  turned out read-only (the next connection may reach the new primary through a
  multi-host URL with ``target_session_attrs=read-write``).
- ``fresh=True`` connects anew instead of taking an idle connection, which may have died
  while idle like the one that just failed; the idle ones are closed at the same time.
- Connecting happens when a statement needs a connection, not in a background task with
  its own growing backoff: the worker's retry loop (:mod:`outbox.delivery.store`) decides
  when to try again, so delivery resumes at its next retry once the database answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from outbox.delivery import queries

Conn = psycopg.AsyncConnection[Any]
CONNECT_TIMEOUT = 5  # seconds per host, unless the URL sets connect_timeout


class Connections:
    """Up to ``size`` connections to ``url`` in use at once; idle ones are kept."""

    def __init__(self, url: str, *, size: int, prepare_threshold: int | None) -> None:
        self.url = url
        self._kwargs: dict[str, Any] = {
            "autocommit": True, "prepare_threshold": prepare_threshold,
            "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
            "keepalives_count": 3}
        if "connect_timeout" not in conninfo_to_dict(url):  # per host of a multi-host URL
            self._kwargs["connect_timeout"] = CONNECT_TIMEOUT
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Conn] = []
        self._closed = False

    async def close(self) -> None:
        """Close the idle connections; those in use close when given back."""
        self._closed = True
        await self.discard_idle()

    async def discard_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    @asynccontextmanager
    async def connection(self, *, fresh: bool = False) -> AsyncIterator[Conn]:
        """A connection outside any transaction; kept for reuse if the block succeeded."""
        async with self._slots:
            if fresh:
                await self.discard_idle()
            conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(self.url, **self._kwargs)
            ok = False
            try:
                yield conn
                ok = conn.info.transaction_status == TransactionStatus.IDLE
            finally:
                if ok and not self._closed and not conn.closed:
                    self._idle.append(conn)
                else:
                    await conn.close()

    @asynccontextmanager
    async def transaction(self, *, fresh: bool = False) -> AsyncIterator[Conn]:
        """The block's statements in one READ COMMITTED transaction, pipelined: they are
        sent with BEGIN and COMMIT when the block ends, in one round trip, and their
        cursors hold their results after it. An error in any rolls all back."""
        async with self.connection(fresh=fresh) as conn, conn.pipeline():
            await conn.execute(queries.BEGIN_READ_COMMITTED)
            yield conn
            await conn.execute(queries.COMMIT)
