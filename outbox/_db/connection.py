"""The driver edge: connecting, schema-qualified SQL, and psycopg error translation.

Every psycopg error that reaches a caller of outbox passes through :func:`translated`
and comes out as an :class:`~outbox.errors.OutboxError` subclass with a one-line message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from outbox.errors import ConfigurationError, DatabaseError, DatabaseUnavailable, SchemaMissing
from outbox.settings import SCHEMA_RE, Settings, get_settings, mask_url


@lru_cache(maxsize=256)
def render(template: str, schema: str) -> str:
    """``template`` with ``{schema}`` replaced by the quoted schema identifier.

    Rendered once per (query, schema) so psycopg sees identical text and can prepare it.
    Every schema name reaching SQL passes here, whether it came from ``OUTBOX_SCHEMA`` or
    a ``schema=`` argument, and must be a lowercase identifier (:data:`SCHEMA_RE`): some
    statements also use it inside string literals (the wake-up's lock key and channel),
    where identifier quoting would not protect them. Otherwise :class:`ConfigurationError`.
    """
    if not isinstance(schema, str) or not SCHEMA_RE.match(schema):
        raise ConfigurationError(
            f"schema {schema!r} must be a lowercase SQL identifier, e.g. 'outbox'")
    return sql.SQL(template).format(schema=sql.Identifier(schema)).as_string()


@contextmanager
def translated(url: str | None = None) -> Iterator[None]:
    """Translate psycopg errors raised inside the block into :mod:`outbox.errors`."""
    try:
        yield
    except pg_errors.UndefinedTable as exc:
        raise SchemaMissing(
            f"outbox tables not found ({exc.diag.message_primary}): run `outbox migrate`"
        ) from exc
    except pg_errors.InvalidSchemaName as exc:
        raise SchemaMissing(
            f"outbox schema not found ({exc.diag.message_primary}): run `outbox migrate`"
        ) from exc
    except psycopg.OperationalError as exc:
        if not _connection_failure(exc):
            raise DatabaseError(_one_line(exc)) from exc
        where = f" at {mask_url(url)}" if url else ""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseUnavailable(f"cannot reach PostgreSQL{where}: {first}") from exc
    except psycopg.Error as exc:
        if read_only(exc):
            where = f" at {mask_url(url)}" if url else ""
            raise DatabaseUnavailable(
                f"PostgreSQL{where} is read-only (a standby, a primary being demoted, or"
                f" default_transaction_read_only): {_one_line(exc)}; connect to the primary"
                " (target_session_attrs=read-write in a multi-host URL)") from exc
        if prepared_statement_clash(exc):
            raise DatabaseError(
                f"{_one_line(exc)}: a transaction-mode pooler (PgBouncer) shares server"
                " connections, so psycopg's prepared statements clash; set"
                " OUTBOX_PREPARE_THRESHOLD=none (and prepare_threshold=None on the app's own"
                " psycopg connections)") from exc
        raise DatabaseError(_one_line(exc)) from exc


READ_ONLY_STATES = frozenset({"25006"})
"""SQLSTATEs of a node that answers but cannot write: read_only_sql_transaction
("cannot execute UPDATE in a read-only transaction", "cannot execute NOTIFY during
recovery") -- a hot standby, a primary being demoted, or default_transaction_read_only."""


def read_only(exc: BaseException) -> bool:
    """The database answered but refused to write (:data:`READ_ONLY_STATES`)."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in READ_ONLY_STATES


def outage(exc: BaseException) -> bool:
    """A failure to wait out, not a bug to report: the connection failed or was cut (no
    SQLSTATE, 08xxx), the server is shutting down, starting or in recovery (57P0x), out of
    connections or resources (53xxx), a statement was cancelled (57014), or the node is
    read-only (:func:`read_only`). A new connection may reach a node that works (a
    multi-host URL with ``target_session_attrs=read-write`` after a failover)."""
    return isinstance(exc, psycopg.OperationalError) or read_only(exc)


def prepared_statement_clash(exc: BaseException) -> bool:
    """A psycopg prepared statement (``_pg3_N``) that exists twice or not at all on the
    server connection: what a transaction-mode pooler does to prepared statements."""
    return (isinstance(exc, (pg_errors.DuplicatePreparedStatement,
                             pg_errors.InvalidSqlStatementName))
            and "_pg3_" in str(exc))


def _connection_failure(exc: psycopg.Error) -> bool:
    """Client-side connection errors (no SQLSTATE), connection exceptions (08xxx) and
    server shutdowns (57P0x) -- not deadlocks or serialisation failures (40xxx)."""
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


def _one_line(exc: psycopg.Error) -> str:
    primary = exc.diag.message_primary if exc.diag else None
    text = primary or str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"


def connect(
    settings: Settings | None = None, *, autocommit: bool = False, connect_timeout: int = 5
) -> psycopg.Connection[tuple[object, ...]]:
    """A new connection to the configured database, or :class:`DatabaseUnavailable`."""
    settings = settings or get_settings()
    with translated(settings.database_url):
        conn = psycopg.connect(
            settings.database_url,
            autocommit=autocommit,
            connect_timeout=connect_timeout,
            prepare_threshold=settings.prepare_threshold,
        )
    return conn
