"""The psycopg2 edge: a connection or a cursor (any cursor class; outbox opens its own plain
cursor on the same connection, so the caller's cursor and its rows are left alone).

In transaction: a non-autocommit connection always is once it runs a statement (the event
commits with whatever the caller commits); an autocommit connection only inside an
explicit ``BEGIN``. A failed transaction is refused before any SQL.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from outbox._emit.drivers.base import FAILED_TRANSACTION, translating
from outbox._emit.drivers.dbapi import CursorRunner
from outbox.errors import NotInTransaction

if TYPE_CHECKING:
    import psycopg2.extensions


def runner(handle: Any) -> CursorRunner | None:
    """A runner for a psycopg2 connection or cursor, or None if ``handle`` is neither."""
    import psycopg2.extensions

    if isinstance(handle, psycopg2.extensions.cursor):
        handle = handle.connection
    if not isinstance(handle, psycopg2.extensions.connection):
        return None
    conn: psycopg2.extensions.connection = handle

    def cursor() -> AbstractContextManager[Any]:
        return conn.cursor(cursor_factory=psycopg2.extensions.cursor)

    return CursorRunner(cursor, lambda: _check(conn), translated, lambda: conn)


def _check(conn: psycopg2.extensions.connection) -> None:
    import psycopg2.extensions as ext

    status = conn.get_transaction_status()
    if status == ext.TRANSACTION_STATUS_INERROR:
        raise NotInTransaction(FAILED_TRANSACTION)
    if conn.autocommit and status == ext.TRANSACTION_STATUS_IDLE:
        raise NotInTransaction(
            "psycopg2 connection is in autocommit mode outside a transaction: emit with "
            "autocommit off (and commit), or inside BEGIN ... COMMIT, so the event commits "
            "with your own writes"
        )


def translated() -> AbstractContextManager[None]:
    import psycopg2

    return translating(psycopg2.Error, (psycopg2.OperationalError, psycopg2.InterfaceError))
