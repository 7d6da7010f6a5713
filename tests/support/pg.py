"""Database plumbing for the tests: the test server and helpers to read what was written.

Server discovery and the template / per-test databases are :mod:`outbox.testing.postgres`
(the ``outbox_*`` fixtures of :mod:`outbox.testing.plugin`, which tests/conftest.py
names ``server_url``, ``template_db``, ``db_url``...); this module re-exports them.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from outbox.testing import postgres
from outbox.testing.postgres import create_database, create_template, drop_database, with_dbname

__all__ = ["SCHEMA", "admin", "count", "create_database", "create_template", "drop_database",
           "outbox_migrations", "server_url", "with_dbname"]

SCHEMA = "outbox"


def server_url() -> str:
    """OUTBOX_TEST_DATABASE_URL, else the local server, else a throwaway cluster."""
    return postgres.find_or_start(os.environ.get("OUTBOX_TEST_DATABASE_URL") or None)


def admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


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
# in flight, no cap (delivery/queries/claim.py BUDGET). Rate limits and pauses still apply.
# No rotation position (`after`): the ring starts at the lowest endpoint id, as a worker's
# first claim does.
UNBUDGETED = {"used_ids": [], "used_counts": [], "default_cap": 1 << 30,
              "floor": -(1 << 63),  # no claim floor: every partition (migrations/0018)
              "after": None}


def claimed_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A claim's result rows without the row an empty claim returns (the rotation's
    position alone: its delivery_id, the first column, is NULL)."""
    return [r for r in rows if r[0] is not None]
