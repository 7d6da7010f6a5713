"""A FastAPI dependency for the inbox (needs ``pip install 'outbox[fastapi]'``)::

    inbox = WebhookInbox(SECRET, lambda: psycopg.AsyncConnection.connect(URL))

    @app.post("/hooks")
    async def hook(delivery: Annotated[Delivery, inbox.depends]) -> dict[str, str]:
        await delivery.conn.execute("INSERT INTO paid VALUES (%s)", (...,))
        return {"ok": "yes"}

Guarantees: a webhook that fails verification, or is not JSON, gets 400 before a database
connection is taken (nothing written); a duplicate gets 200 and the handler is not called.
Otherwise the handler runs inside a transaction on ``delivery.conn`` that already holds the
webhook-id: when it returns, the transaction commits *before* the response is sent (the
dependency has ``scope="function"``), so a 2xx never goes out for an uncommitted effect and
a failed commit answers 500. When it raises (an ``HTTPException`` too), everything rolls
back and the sender's retry is processed afresh. A response the handler *returns*, whatever
its status, commits: raise to refuse.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from fastapi import Depends, HTTPException, Request

from outbox.errors import InvalidWebhook
from outbox.inbox import Received, Secrets, _secrets, record_async, verified

__all__ = ["Delivery", "WebhookInbox"]

AsyncConnectionSource = Callable[
    [], AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]
    | Awaitable[psycopg.AsyncConnection[Any]]]
"""``pool.connection`` (psycopg_pool) or ``lambda: psycopg.AsyncConnection.connect(url)``."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """A new webhook: the verified ``event`` and ``conn``, in the transaction that records
    its id; do the business writes on ``conn``."""

    event: Received
    conn: psycopg.AsyncConnection[Any]


@asynccontextmanager
async def _opened(source: AsyncConnectionSource) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    made = source()
    if inspect.isawaitable(made):
        async with await made as conn:
            yield conn
    else:
        async with made as conn:
            yield conn


class WebhookInbox:
    """The dependency: use ``Annotated[Delivery, inbox.depends]`` (see the module)."""

    def __init__(self, secret_or_secrets: Secrets, connection: AsyncConnectionSource, *,
                 schema: str | None = None, source: str = "",
                 tolerance_seconds: int = 300) -> None:
        self._secrets = _secrets(secret_or_secrets)  # a malformed secret fails here, at start
        self._connection = connection
        self._schema = schema
        self._source = source
        self._tolerance = tolerance_seconds
        self.depends: Any = Depends(self, scope="function")
        """``Depends(self, scope="function")``: commit before the response is sent."""

    async def __call__(self, request: Request) -> AsyncIterator[Delivery]:
        try:
            event = verified(self._secrets, await request.body(), request.headers,
                             tolerance_seconds=self._tolerance)
        except InvalidWebhook as exc:
            raise HTTPException(400, str(exc)) from None
        async with _opened(self._connection) as conn, conn.transaction():
            if not await record_async(conn, event, schema=self._schema, source=self._source):
                raise HTTPException(200, "duplicate: already processed")
            yield Delivery(event, conn)
