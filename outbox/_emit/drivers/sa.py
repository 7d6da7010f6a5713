"""The SQLAlchemy 2 edge: ``Session``, ``Connection``, ``AsyncSession``, ``AsyncConnection``
(and their ``scoped_session`` registries), on the psycopg, psycopg2 and asyncpg dialects.

Every statement runs through the ORM's own connection (``Connection.exec_driver_sql`` on the
connection the session holds for its transaction), never on the raw driver connection
underneath: SQLAlchemy's asyncpg adapter begins its transaction lazily, so a statement sent
straight to asyncpg before SQLAlchemy ran one would commit on its own. SQLAlchemy's
autobegin counts as a transaction (the event commits with ``session.commit()``); a
connection whose isolation level is ``AUTOCOMMIT`` is refused with NotInTransaction before
any SQL, and so is a session with ``autobegin=False`` outside ``session.begin()``. A session
with several binds and no default one is a ConfigurationError (give emit
``session.connection(bind_arguments=...)``, the connection of that session's transaction on
the right database). An ``AsyncConnection`` not yet started is refused (NotInTransaction):
outbox does not start connections.

On the psycopg2 dialect the single-event emits are prepared after ``prepare_threshold``
runs on a connection, as :mod:`outbox._emit.drivers.dbapi` does for psycopg2 itself (psycopg 3
and SQLAlchemy's asyncpg adapter prepare statements on their own).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from outbox._emit.drivers.base import FAILED_TRANSACTION, Params, Style, as_tuples, translate
from outbox._emit.drivers.dbapi import prepared
from outbox.errors import ConfigurationError, NotInTransaction

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

DRIVERS = {"psycopg": "pyformat", "psycopg2": "pyformat", "asyncpg": "dollar"}


def _style_of(conn: Connection) -> Style:
    """The paramstyle for ``conn``; NotInTransaction in AUTOCOMMIT; TypeError off PostgreSQL
    or on a driver outbox does not speak."""
    dialect = conn.dialect
    style = DRIVERS.get(dialect.driver) if dialect.name == "postgresql" else None
    if style is None:
        raise TypeError(
            f"outbox emits through SQLAlchemy on PostgreSQL with the psycopg, psycopg2 or "
            f"asyncpg driver, not {dialect.name}+{dialect.driver}"
        )
    if getattr(conn.connection.dbapi_connection, "autocommit", False):
        raise NotInTransaction(
            "the SQLAlchemy connection is in AUTOCOMMIT isolation: emit in a Session or "
            "`with engine.begin()` on a transactional connection so the event commits with "
            "your own writes"
        )
    return "pyformat" if style == "pyformat" else "dollar"


def _no_autobegin(session: Session) -> NotInTransaction | None:
    if session.autobegin or session.in_transaction():
        return None
    return NotInTransaction(
        "the SQLAlchemy session has autobegin=False and no transaction: emit inside "
        "`with session.begin():` so the event commits with your own writes"
    )


UNBOUND = (
    "the SQLAlchemy session has no bind for outbox's statements (several binds, no default): "
    "pass emit the connection of the database holding the outbox schema, in the session's "
    "transaction: outbox.emit(session.connection(bind_arguments={'bind': engine}), event)"
)

NOT_STARTED = (
    "the SQLAlchemy AsyncConnection was never started (no connection, no transaction): "
    "emit on `async with engine.begin() as conn:` or `conn = await engine.connect()`, "
    "and commit it with your own writes"
)

_NO_PARAMETERS: Any = {"no_parameters": True}  # cursor.execute(text): no % formatting


def _args(params: Params) -> Any:
    return params if isinstance(params, dict) else tuple(params)


@contextmanager
def translated() -> Iterator[None]:
    from sqlalchemy import exc as sa_exc

    try:
        yield
    except sa_exc.UnboundExecutionError as exc:
        raise ConfigurationError(UNBOUND) from exc
    except sa_exc.PendingRollbackError as exc:
        raise NotInTransaction(FAILED_TRANSACTION) from exc
    except sa_exc.DBAPIError as exc:
        raise translate(exc, connection_error=exc.connection_invalidated) from exc


class SessionRunner:
    """A :class:`~outbox._emit.drivers.base.SyncRunner` over a Session or a Connection."""

    style: Style = "pyformat"
    prepare_threshold: int | None = None  # the driver under SQLAlchemy prepares, if it does

    def __init__(self, handle: Session | Connection) -> None:
        self._handle = handle
        self._conn: Connection | None = None

    def check(self) -> None:
        from sqlalchemy.orm import Session

        with translated():
            h = self._handle
            if isinstance(h, Session) and (refused := _no_autobegin(h)):
                raise refused
            conn = h.connection() if isinstance(h, Session) else h
            self.style = _style_of(conn)
            self._conn = conn

    def _statement(self, conn: Connection, query: str, params: Params) -> tuple[str, Any]:
        if conn.dialect.driver != "psycopg2":
            return query, _args(params)

        def fetch(sql: str, args: Params | None) -> list[tuple[Any, ...]]:
            result = (conn.exec_driver_sql(sql, execution_options=_NO_PARAMETERS)
                      if args is None else conn.exec_driver_sql(sql, _args(args)))
            return as_tuples(result.fetchall()) if result.returns_rows else []

        query, params = prepared(conn.connection.dbapi_connection, query, params,
                                 self.prepare_threshold, fetch)
        return query, _args(params)

    def run(self, query: str, params: Params) -> None:
        assert self._conn is not None, "check() first"
        with translated():
            self._conn.exec_driver_sql(*self._statement(self._conn, query, params)).close()

    def rows(self, query: str, params: Params) -> list[tuple[Any, ...]]:
        assert self._conn is not None, "check() first"
        with translated():
            result = self._conn.exec_driver_sql(*self._statement(self._conn, query, params))
            return as_tuples(result.fetchall())


class AsyncSessionRunner:
    """An :class:`~outbox._emit.drivers.base.AsyncRunner` over an AsyncSession or
    AsyncConnection."""

    style: Style = "pyformat"
    prepare_threshold: int | None = None  # the driver under SQLAlchemy prepares, if it does

    def __init__(self, handle: AsyncSession | AsyncConnection) -> None:
        self._handle = handle
        self._conn: AsyncConnection | None = None

    async def check(self) -> None:
        from sqlalchemy.ext.asyncio import AsyncSession

        with translated():
            h = self._handle
            if isinstance(h, AsyncSession) and (refused := _no_autobegin(h.sync_session)):
                raise refused
            conn = await h.connection() if isinstance(h, AsyncSession) else h
            if conn.sync_connection is None:
                raise NotInTransaction(NOT_STARTED)
            self.style = _style_of(conn.sync_connection)
            self._conn = conn

    async def run(self, query: str, params: Params) -> None:
        assert self._conn is not None, "check() first"
        with translated():
            (await self._conn.exec_driver_sql(query, _args(params))).close()

    async def rows(self, query: str, params: Params) -> list[tuple[Any, ...]]:
        assert self._conn is not None, "check() first"
        with translated():
            result = await self._conn.exec_driver_sql(query, _args(params))
            return as_tuples(result.fetchall())


def runner(handle: Any) -> SessionRunner | None:
    """A sync runner for a Session, Connection or scoped_session; else None."""
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(handle, scoped_session):
        handle = handle()
    if isinstance(handle, Session | Connection):
        return SessionRunner(handle)
    return None


def async_runner(handle: Any) -> AsyncSessionRunner | None:
    """An async runner for an AsyncSession, AsyncConnection or async_scoped_session."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(handle, async_scoped_session):
        handle = handle()
    if isinstance(handle, AsyncSession | AsyncConnection):
        return AsyncSessionRunner(handle)
    return None
