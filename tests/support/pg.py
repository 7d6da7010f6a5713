"""Database plumbing for the tests: server discovery, template and per-test databases.

A session-wide template database gets the migrations once; each test that needs commits
gets its own ``CREATE DATABASE ... TEMPLATE`` copy, dropped afterwards. Names carry a
random suffix, so runs can repeat and overlap.
"""

from __future__ import annotations

import os
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from outbox import devdb
from outbox.migrate import migrate

SCHEMA = "outbox"


def server_url() -> str:
    """OUTBOX_TEST_DATABASE_URL, else the local server, else a throwaway cluster."""
    return devdb.find_or_start(os.environ.get("OUTBOX_TEST_DATABASE_URL") or None)


def with_dbname(url: str, dbname: str) -> str:
    """``url`` pointing at database ``dbname``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def create_database(server: str, *, template: str | None = None, prefix: str = "outbox_t") -> str:
    """A new database (copied from ``template`` if given); returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(name), sql.Identifier(template or "template0")
    )
    with admin(server) as conn:
        conn.execute(query)
    return with_dbname(server, name)


def drop_database(server: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with admin(server) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


def create_template(server: str) -> str:
    """A migrated database to copy from; returns its name."""
    url = create_database(server, prefix="outbox_tpl")
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, SCHEMA)
    return urlsplit(url).path.lstrip("/")


def count(url: str, table: str, where: str = "TRUE") -> int:
    """Rows in ``outbox.<table>`` matching ``where`` (test-only SQL)."""
    query = f"SELECT count(*) FROM {SCHEMA}.{table} WHERE {where}"
    with psycopg.connect(url) as conn:
        row = conn.execute(query.encode()).fetchone()
    assert row is not None
    return int(row[0])


def outbox_migrations(url: str, schema: str = SCHEMA) -> list[tuple[Any, ...]]:
    """``(version, checksum, applied_at)`` of each migration applied to ``schema``."""
    query = f"SELECT version, checksum, applied_at FROM {schema}.schema_migrations ORDER BY 1"
    with psycopg.connect(url) as conn:
        return conn.execute(query.encode()).fetchall()


# The claim's budget parameters for a test that reads the claim alone (no worker): nothing
# in flight, no cap (delivery/queries.py BUDGET). Rate limits and pauses still apply.
UNBUDGETED = {"used_ids": [], "used_counts": [], "default_cap": 1 << 30}
