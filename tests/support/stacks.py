"""One test-facing interface over every handle outbox.emit takes.

A :class:`Stack` opens a handle on a test database the way an application on that stack
would, with a business table ``orders``, and offers the same synchronous steps whatever the
driver: ``write`` (a business INSERT), ``emit`` / ``emit_many``, ``commit``, ``rollback``,
``fail`` (a statement that fails inside the transaction). Async stacks run each step on one
event loop kept for the handle's lifetime. ``autocommit=True`` opens the handle outside a
transaction, as that stack's autocommit mode has it.

Each handle is also set up as applications set theirs, to show it changes nothing: dict
rows (psycopg ``dict_row``, psycopg2 ``RealDictCursor``) and a json codec on asyncpg.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import psycopg
import psycopg2
import psycopg2.extras
import pytest
from psycopg.rows import dict_row
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import outbox
from outbox import Event

ORDERS = "CREATE TABLE IF NOT EXISTS public.orders (id int PRIMARY KEY)"


def sa_url(url: str, driver: str) -> str:
    return url.replace("postgresql://", f"postgresql+{driver}://", 1)


class Stack:
    """A handle of one stack on ``url``; subclasses fill in the driver's steps."""

    name = ""
    is_async = False

    def __init__(self, url: str, *, autocommit: bool = False) -> None:
        self.url = url
        self.autocommit = autocommit
        self.loop = asyncio.Runner() if self.is_async else None
        self.handle: Any = self.call(self.open)

    def call(self, step: Callable[[], Any]) -> Any:
        result = step()
        if isinstance(result, Coroutine):
            assert self.loop is not None
            return self.loop.run(result)
        return result

    # the driver's steps (coroutine functions on async stacks)
    def open(self) -> Any:
        raise NotImplementedError

    def execute(self, sql: str, n: int | None = None) -> Any:
        raise NotImplementedError

    def end(self, commit: bool) -> Any:
        raise NotImplementedError

    def close(self) -> Any:
        raise NotImplementedError

    # the test-facing steps
    def write(self, n: int) -> None:
        self.call(lambda: self.execute("INSERT INTO public.orders VALUES (%s)", n))

    def fail(self) -> None:
        with pytest.raises((psycopg.Error, psycopg2.Error, asyncpg.PostgresError, DBAPIError)):
            self.call(lambda: self.execute("SELECT 1/0"))

    def emit(self, event: Event, **kwargs: Any) -> uuid.UUID:
        if self.is_async:
            return self.call(lambda: outbox.emit_async(self.handle, event, **kwargs))  # type: ignore[no-any-return]
        return outbox.emit(self.handle, event, **kwargs)

    def emit_many(self, events: list[Event], **kwargs: Any) -> list[uuid.UUID]:
        if self.is_async:
            return self.call(  # type: ignore[no-any-return]
                lambda: outbox.emit_many_async(self.handle, events, **kwargs))
        return outbox.emit_many(self.handle, events, **kwargs)

    def commit(self) -> None:
        self.call(lambda: self.end(True))

    def rollback(self) -> None:
        self.call(lambda: self.end(False))

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.close)
        if self.loop is not None:
            self.loop.close()


class Psycopg(Stack):
    name = "psycopg"

    def open(self) -> Any:
        return psycopg.connect(self.url, row_factory=dict_row, autocommit=self.autocommit)

    def execute(self, sql: str, n: int | None = None) -> Any:
        self.handle.execute(sql.encode(), None if n is None else (n,))

    def end(self, commit: bool) -> Any:
        self.handle.commit() if commit else self.handle.rollback()

    def close(self) -> Any:
        self.handle.close()


class PsycopgAsync(Stack):
    name = "psycopg-async"
    is_async = True

    async def open(self) -> Any:
        return await psycopg.AsyncConnection.connect(self.url, row_factory=dict_row,
                                                     autocommit=self.autocommit)

    async def execute(self, sql: str, n: int | None = None) -> Any:
        await self.handle.execute(sql.encode(), None if n is None else (n,))

    async def end(self, commit: bool) -> Any:
        await (self.handle.commit() if commit else self.handle.rollback())

    async def close(self) -> Any:
        await self.handle.close()


class Psycopg2(Stack):
    name = "psycopg2"

    def open(self) -> Any:
        conn = psycopg2.connect(self.url, cursor_factory=psycopg2.extras.RealDictCursor)
        conn.autocommit = self.autocommit
        return conn

    def execute(self, sql: str, n: int | None = None) -> Any:
        with self.connection().cursor() as cur:
            cur.execute(sql, None if n is None else (n,))

    def connection(self) -> Any:
        return self.handle

    def end(self, commit: bool) -> Any:
        self.connection().commit() if commit else self.connection().rollback()

    def close(self) -> Any:
        self.connection().close()


class Psycopg2Cursor(Psycopg2):
    """The handle is a cursor (a DictCursor) of the connection."""

    name = "psycopg2-cursor"

    def open(self) -> Any:
        return super().open().cursor(cursor_factory=psycopg2.extras.DictCursor)

    def connection(self) -> Any:
        return self.handle.connection


class Asyncpg(Stack):
    """asyncpg: a transaction is open between steps (``end`` starts the next one)."""

    name = "asyncpg"
    is_async = True
    tx: Any = None

    async def connect(self) -> Any:
        return await asyncpg.connect(self.url)

    async def open(self) -> Any:
        conn = await self.connect()
        await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads,
                                  schema="pg_catalog")
        if not self.autocommit:
            self.tx = conn.transaction()
            await self.tx.start()
        return conn

    async def execute(self, sql: str, n: int | None = None) -> Any:
        args = () if n is None else (n,)
        await self.handle.execute(sql.replace("%s", "$1"), *args)

    async def end(self, commit: bool) -> Any:
        await (self.tx.commit() if commit else self.tx.rollback())
        self.tx = self.handle.transaction()
        await self.tx.start()

    async def close(self) -> Any:
        if self.tx is not None:
            await self.tx.rollback()
        await self.handle.close()


class AsyncpgPool(Asyncpg):
    name = "asyncpg-pool"
    pool: Any = None

    async def connect(self) -> Any:
        self.pool = await asyncpg.create_pool(self.url, min_size=1, max_size=1)
        return await self.pool.acquire()

    async def close(self) -> Any:
        if self.tx is not None:
            await self.tx.rollback()
        await self.pool.release(self.handle)
        await self.pool.close()


class SASession(Stack):
    """SQLAlchemy ``Session`` on ``driver`` (psycopg or psycopg2)."""

    driver = "psycopg"
    engine: Any = None

    def open(self) -> Any:
        self.engine = create_engine(sa_url(self.url, self.driver))
        if self.autocommit:
            return Session(self.engine.execution_options(isolation_level="AUTOCOMMIT"))
        return Session(self.engine)

    def execute(self, sql: str, n: int | None = None) -> Any:
        self.handle.execute(text(sql.replace("%s", ":n")), {"n": n})

    def end(self, commit: bool) -> Any:
        self.handle.commit() if commit else self.handle.rollback()

    def close(self) -> Any:
        self.handle.close()
        self.engine.dispose()


class SASessionPsycopg(SASession):
    name = "sa-session-psycopg"


class SASessionPsycopg2(SASession):
    name = "sa-session-psycopg2"
    driver = "psycopg2"


class SAConnection(SASession):
    """SQLAlchemy ``Connection`` (commit as you go) on psycopg."""

    name = "sa-connection-psycopg"

    def open(self) -> Any:
        self.engine = create_engine(sa_url(self.url, self.driver))
        conn = self.engine.connect()
        return conn.execution_options(isolation_level="AUTOCOMMIT") if self.autocommit else conn


class SAAsyncSession(Stack):
    """SQLAlchemy ``AsyncSession`` on ``driver`` (asyncpg or psycopg)."""

    name = "sa-asyncsession-asyncpg"
    is_async = True
    driver = "asyncpg"
    engine: Any = None

    async def open(self) -> Any:
        self.engine = create_async_engine(sa_url(self.url, self.driver))
        if self.autocommit:
            return AsyncSession(self.engine.execution_options(isolation_level="AUTOCOMMIT"))
        return AsyncSession(self.engine)

    async def execute(self, sql: str, n: int | None = None) -> Any:
        await self.handle.execute(text(sql.replace("%s", ":n")), {"n": n})

    async def end(self, commit: bool) -> Any:
        await (self.handle.commit() if commit else self.handle.rollback())

    async def close(self) -> Any:
        await self.handle.close()
        await self.engine.dispose()


class SAAsyncSessionPsycopg(SAAsyncSession):
    name = "sa-asyncsession-psycopg"
    driver = "psycopg"


class SAAsyncConnection(SAAsyncSession):
    """SQLAlchemy ``AsyncConnection`` on asyncpg."""

    name = "sa-asyncconnection-asyncpg"

    async def open(self) -> Any:
        self.engine = create_async_engine(sa_url(self.url, self.driver))
        conn = await self.engine.connect()
        if self.autocommit:
            return await conn.execution_options(isolation_level="AUTOCOMMIT")
        return conn


STACKS: list[type[Stack]] = [
    Psycopg, PsycopgAsync, Psycopg2, Psycopg2Cursor, Asyncpg, AsyncpgPool, SASessionPsycopg,
    SASessionPsycopg2, SAConnection, SAAsyncSession, SAAsyncSessionPsycopg, SAAsyncConnection,
]
