"""Run outbox's migrations from an Alembic revision: ``outbox.contrib.alembic.upgrade()``.

In a revision of your own (``alembic revision -m "outbox"``)::

    from outbox.contrib import alembic as outbox_alembic

    def upgrade() -> None:
        outbox_alembic.upgrade()

    def downgrade() -> None:
        pass  # the outbox schema stays: it may hold undelivered events

Guarantees: the same SQL files, checks and advisory lock as ``outbox migrate``
(:func:`outbox.admin.migrations.apply_in_transaction`), run through the revision's own connection
(``op.get_bind()``) inside Alembic's transaction, so they commit with the revision and with
Alembic's version row, or not at all. The caller's ``search_path`` is unchanged afterwards
(later unqualified DDL still lands where it would have). Applying it on a schema that
``outbox migrate`` already created changes nothing.

Later outbox releases: outbox's own record (``<schema>.schema_migrations``), not Alembic's,
says what is applied, so after upgrading outbox add a revision that calls ``upgrade()``
again (or run ``outbox migrate``); it applies only the new files.

Drivers: psycopg (3), psycopg2, and asyncpg (an async ``env.py`` running migrations through
``connection.run_sync``, as Alembic's ``async`` template does). ``alembic upgrade --sql``
(offline) is refused: use ``outbox migrate --print`` for the SQL.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Sequence
from typing import Any, Protocol

import sqlalchemy.util
from alembic.operations import Operations

from outbox._db import queries
from outbox.admin.capture import OPERATIONS, add_statement, remove_statement
from outbox.admin.migrations import Cursor, Migration, apply_in_transaction, available
from outbox.errors import ConfigurationError
from outbox.settings import get_settings

__all__ = ["capture", "uncapture", "upgrade"]


def upgrade(op: Operations | None = None, *, schema: str | None = None,
            inbox: bool = False) -> list[Migration]:
    """Apply the pending outbox migrations in the running Alembic revision's transaction.

    ``op``: Alembic's ``op`` (the default); ``schema``: else ``OUTBOX_SCHEMA``; ``inbox``:
    the receiving side's inbox series instead (as ``outbox migrate --inbox``). Returns the
    migrations applied.
    """
    if op is None:
        from alembic import op as running_op

        op = running_op  # type: ignore[assignment]
    assert op is not None
    if op.get_context().as_sql:
        raise ConfigurationError(
            "outbox.contrib.alembic.upgrade() needs a database connection (not `--sql`): "
            "use `outbox migrate --print` for the SQL")
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        raise ConfigurationError(f"outbox needs PostgreSQL, not {bind.dialect.name}")
    scripts = {m.sql for m in available(inbox=inbox)}
    with contextlib.closing(_cursor(bind.connection, bind.dialect.driver, scripts)) as cursor:
        return apply_in_transaction(cursor, schema or get_settings().schema_name, inbox=inbox)


def capture(table: str, *, type: str, key: str | None = None, tenant: str | None = None,
            on: Sequence[str] = OPERATIONS, columns: Sequence[str] | None = None,
            schema: str | None = None, op: Operations | None = None) -> None:
    """Install (or replace) the capture of ``table`` in the running revision: ``op.execute``
    of :func:`outbox.admin.capture.add_statement` (guarantees there), so it commits with the
    revision; offline (``alembic upgrade --sql``) it is printed with the rest. Put it in a
    revision after the one calling :func:`upgrade`::

        def upgrade() -> None:
            outbox_alembic.capture("orders", type="order.changed", key="id",
                                   columns=["id", "status", "total"])

        def downgrade() -> None:
            outbox_alembic.uncapture("orders")
    """
    _op(op).execute(add_statement(table, type=type, key=key, tenant=tenant, on=on,
                                  columns=columns, schema=schema or get_settings().schema_name))


def uncapture(table: str, *, schema: str | None = None, op: Operations | None = None) -> None:
    """Drop the capture of ``table`` in the running revision (none: nothing happens)."""
    _op(op).execute(remove_statement(table, schema=schema or get_settings().schema_name))


def _op(op: Operations | None) -> Operations:
    if op is not None:
        return op
    from alembic import op as running_op

    return running_op  # type: ignore[return-value]


class _ClosingCursor(Cursor, Protocol):
    """A :class:`~outbox.admin.migrations.Cursor` that :func:`upgrade` closes when done."""

    def close(self) -> None: ...


def _cursor(dbapi_connection: Any, driver: str, scripts: Collection[str]) -> _ClosingCursor:
    """A cursor of the revision's connection; ``scripts``: the migration files it will be
    given (asyncpg runs each as one script; psycopg and psycopg2 take them as they are)."""
    if driver == "asyncpg":
        return _AsyncpgCursor(dbapi_connection, scripts)
    cursor: _ClosingCursor = dbapi_connection.cursor()
    return cursor


class _AsyncpgCursor:
    """A ``%s`` cursor over SQLAlchemy's asyncpg adapter, in its transaction: parameters
    become ``$n``. A migration file (one of ``scripts``, which may hold many statements)
    goes to asyncpg's ``execute``, which runs it as one script and returns no rows; every
    other statement goes through the adapter's cursor, whose rows ``fetchall`` returns."""

    def __init__(self, adapted: Any, scripts: Collection[str]) -> None:
        self._cursor = adapted.cursor()
        self._driver = adapted.driver_connection
        self._scripts = frozenset(scripts)
        self._rows: Sequence[Any] | None = None
        # the adapter begins its transaction lazily: begin it before any script runs
        self._cursor.execute(queries.BEGIN_TRANSACTION)

    def execute(self, query: Any, params: Any = None, /) -> None:
        if params is None and query in self._scripts:
            _await(self._driver.execute(query))
            self._rows = ()
            return
        numbered = iter(range(1, 1 + len(params or ())))
        self._cursor.execute(re.sub("%s", lambda _: f"${next(numbered)}", query), params)
        self._rows = None

    def fetchall(self) -> Sequence[Any]:
        if self._rows is not None:  # a script: no rows
            return self._rows
        rows: Sequence[Any] = self._cursor.fetchall()
        return rows

    def close(self) -> None:
        self._cursor.close()


def _await(awaitable: Any) -> Any:
    wait = getattr(sqlalchemy.util, "await_", None) or sqlalchemy.util.await_only
    return wait(awaitable)
