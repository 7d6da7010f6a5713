"""Apply the numbered SQL files of ``outbox.migrations`` (the repository's ``migrations/``).

Guarantees:

- All pending migrations apply in version order inside ONE transaction, recorded in
  ``<schema>.schema_migrations``: a failure leaves the database exactly as it was.
- An advisory transaction lock serialises concurrent runs: the second run waits for the
  first to commit, then finds nothing pending and changes nothing. The lock and the work
  are one READ COMMITTED transaction (whatever the database's default isolation), so it
  holds behind a transaction-mode pooler (PgBouncer) too.
- A recorded migration whose file changed since is reported (:class:`MigrationError`),
  never silently re-applied.

Two series share ``migrations/`` and this code. The sender's (``NNNN_name.sql``, recorded in
``<schema>.schema_migrations``) and the receiving side's inbox (``inbox_NNNN_name.sql``,
recorded in ``<schema>.inbox_migrations``; ``inbox=True``, ``outbox migrate --inbox``), so a
receiver-only service gets the ``inbox`` table and none of the sender's tables, and each
series numbers its files on its own. Both take the same advisory lock (per schema), so a
sender and an inbox migration of one schema never run at once either.

:func:`migrate` runs in a transaction of its own on a psycopg 3 connection (``outbox
migrate``). :func:`apply_in_transaction` is the same work on any DB-API cursor in the
caller's transaction (psycopg 3 or psycopg2, Django's ``manage.py migrate``, an Alembic
revision): the same files, checks and lock, committed with the caller's own changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

import psycopg

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox.errors import MigrationError

__all__ = [
    "Cursor",
    "Migration",
    "apply_in_transaction",
    "available",
    "migrate",
    "script",
]

_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_INBOX_NAME_RE = re.compile(r"^inbox_(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class _Series:
    """One numbered series of files and the table that records it."""

    pattern: re.Pattern[str]
    table: str  # MIGRATIONS_TABLE
    applied: str  # MIGRATIONS_APPLIED
    record: str  # MIGRATION_RECORD


_SENDER = _Series(_NAME_RE, queries.MIGRATIONS_TABLE, queries.MIGRATIONS_APPLIED,
                  queries.MIGRATION_RECORD)
_INBOX = _Series(_INBOX_NAME_RE, queries.INBOX_MIGRATIONS_TABLE,
                 queries.INBOX_MIGRATIONS_APPLIED, queries.INBOX_MIGRATION_RECORD)


def _series(inbox: bool) -> _Series:
    return _INBOX if inbox else _SENDER


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


class Cursor(Protocol):
    """The part of a DB-API cursor :func:`apply_in_transaction` uses (``%s`` placeholders:
    psycopg 3, psycopg2, Django's cursor)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def fetchall(self) -> Sequence[Any]: ...


def available(*, inbox: bool = False) -> list[Migration]:
    """The migrations shipped with the package, in version order (``inbox``: the inbox
    series)."""
    found: list[Migration] = []
    for entry in resources.files("outbox.migrations").iterdir():
        match = _series(inbox).pattern.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {versions}")
    return found


def script(schema: str, *, inbox: bool = False) -> str:
    """The whole schema as one SQL script, for DBAs and Kubernetes Jobs (no connection)."""
    series = _series(inbox)
    prefix = "inbox_" if inbox else ""
    parts = [
        "BEGIN;",
        render(queries.CREATE_SCHEMA, schema) + ";",
        render(queries.SET_SEARCH_PATH, schema) + ";",
        render(series.table, schema).strip() + ";",
    ]
    for m in available(inbox=inbox):
        parts.append(f"\n-- {prefix}{m.version:04d}_{m.name}.sql\n{m.sql.strip()}")
        parts.append(
            render(series.record, schema).strip().replace(
                "(%s, %s, %s)", f"({m.version}, '{m.name}', '{m.checksum}')"
            )
            + "\nON CONFLICT (version) DO NOTHING;"
        )
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str, *,
            inbox: bool = False) -> list[Migration]:
    """Apply pending migrations; return those applied (empty on the second run).

    ``inbox``: the inbox series only (the receiving side's table), not the sender's.
    ``conn`` must be idle (not inside a transaction); it is used in its own transaction.
    """
    with translated(), conn.transaction(), conn.cursor() as cur:
        # Before the lock: a snapshot taken before the lock was granted (REPEATABLE READ
        # or SERIALIZABLE by default) would not see what the run it waited for committed.
        cur.execute(queries.MIGRATION_READ_COMMITTED)
        return apply_in_transaction(cur, schema, inbox=inbox)


def apply_in_transaction(cursor: Cursor, schema: str, *,
                         inbox: bool = False) -> list[Migration]:
    """Apply pending migrations through ``cursor``, inside the caller's open transaction.

    Nothing is committed here: the migrations, their records and the advisory lock (held
    until then, so concurrent runs wait) commit or roll back with the caller's transaction.
    Concurrent runs are serialised only in READ COMMITTED transactions (the default of
    PostgreSQL, Django and Alembic): under REPEATABLE READ or SERIALIZABLE the snapshot
    predates the lock, and a run that waited would not see what the other committed.
    The transaction's ``search_path`` is the same afterwards, so the caller's later
    unqualified statements do not land in ``schema``. Return the migrations applied.
    """
    series = _series(inbox)
    with translated():
        cursor.execute(queries.MIGRATION_LOCK, (schema,))
        cursor.execute(render(queries.CREATE_SCHEMA, schema))
        cursor.execute(render(series.table, schema))
        cursor.execute(render(series.applied, schema))
        applied = {int(version): checksum for version, _, checksum in cursor.fetchall()}
        pending = _pending(applied, inbox)
        if pending:
            cursor.execute(queries.SHOW_SEARCH_PATH)
            search_path = cursor.fetchall()[0][0]
            cursor.execute(render(queries.SET_SEARCH_PATH, schema))
            for m in pending:
                cursor.execute(m.sql)
                cursor.execute(render(series.record, schema), (m.version, m.name, m.checksum))
            cursor.execute(queries.RESTORE_SEARCH_PATH, (search_path,))
    return pending


def _pending(applied: dict[int, str], inbox: bool) -> list[Migration]:
    """The shipped migrations not in ``applied`` (version -> checksum), or MigrationError
    if an applied one changed since."""
    pending: list[Migration] = []
    for m in available(inbox=inbox):
        if m.version in applied:
            if applied[m.version] != m.checksum:
                raise MigrationError(
                    f"migration {m.version:04d}_{m.name} changed after it was applied"
                )
            continue
        pending.append(m)
    return pending
