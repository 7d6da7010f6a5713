"""Apply the numbered SQL files of ``outbox.migrations`` (the repository's ``migrations/``).

Guarantees:

- All pending migrations apply in version order inside ONE transaction, recorded in
  ``<schema>.schema_migrations``: a failure leaves the database exactly as it was.
- An advisory transaction lock serialises concurrent runs: the second run waits for the
  first to commit, then finds nothing pending and changes nothing.
- A recorded migration whose file changed since is reported (:class:`MigrationError`),
  never silently re-applied.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg.rows import class_row

from outbox import queries
from outbox.db import render, translated
from outbox.errors import MigrationError

_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Applied:
    """A ``schema_migrations`` row (MIGRATIONS_APPLIED)."""

    version: int
    name: str
    checksum: str


def available() -> list[Migration]:
    """The migrations shipped with the package, in version order."""
    found: list[Migration] = []
    for entry in resources.files("outbox.migrations").iterdir():
        match = _NAME_RE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {versions}")
    return found


def script(schema: str) -> str:
    """The whole schema as one SQL script, for DBAs and Kubernetes Jobs (no connection)."""
    parts = [
        "BEGIN;",
        render(queries.CREATE_SCHEMA, schema) + ";",
        render(queries.SET_SEARCH_PATH, schema) + ";",
        render(queries.MIGRATIONS_TABLE, schema).strip() + ";",
    ]
    for m in available():
        parts.append(f"\n-- {m.version:04d}_{m.name}.sql\n{m.sql.strip()}")
        parts.append(
            render(queries.MIGRATION_RECORD, schema).strip().replace(
                "(%s, %s, %s)", f"({m.version}, '{m.name}', '{m.checksum}')"
            )
            + "\nON CONFLICT (version) DO NOTHING;"
        )
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[Migration]:
    """Apply pending migrations; return those applied (empty on the second run).

    ``conn`` must be idle (not inside a transaction); it is used in its own transaction.
    """
    with translated(), conn.transaction():
        conn.execute(queries.MIGRATION_LOCK, (schema,))
        conn.execute(render(queries.CREATE_SCHEMA, schema))
        conn.execute(render(queries.MIGRATIONS_TABLE, schema))
        with conn.cursor(row_factory=class_row(_Applied)) as cur:
            cur.execute(render(queries.MIGRATIONS_APPLIED, schema))
            applied = {a.version: a.checksum for a in cur.fetchall()}
        pending: list[Migration] = []
        for m in available():
            if m.version in applied:
                if applied[m.version] != m.checksum:
                    raise MigrationError(
                        f"migration {m.version:04d}_{m.name} changed after it was applied"
                    )
                continue
            pending.append(m)
        conn.execute(render(queries.SET_SEARCH_PATH, schema))
        for m in pending:
            conn.execute(m.sql.encode())
            conn.execute(
                render(queries.MIGRATION_RECORD, schema), (m.version, m.name, m.checksum)
            )
    return pending
