"""``alembic upgrade head`` of a real Alembic project (tests/alembic_project/) whose first
revision is the snippet of docs/guides/migrations.md,
``outbox.contrib.alembic.upgrade()``, on the psycopg 3, psycopg2 and asyncpg drivers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, pool
from sqlalchemy.ext.asyncio import create_async_engine

from outbox.admin.migrations import available
from outbox.contrib.alembic import _cursor
from tests.support.docs import snippet
from tests.support.pg import outbox_migrations
from tests.support.workers import rows, wait_until

ROOT = Path(__file__).resolve().parents[2]
INI = ROOT / "tests" / "alembic_project" / "alembic.ini"
ALL = [m.version for m in available()]
DRIVERS = ["psycopg", "psycopg2", "asyncpg"]


def _env(db_url: str, driver: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TEST_ALEMBIC"))}
    sa_url = db_url.replace("postgresql://", f"postgresql+{driver}://", 1)
    return env | {"TEST_ALEMBIC_URL": sa_url, **extra}


def alembic(db_url: str, *args: str, driver: str = "psycopg", check: bool = True,
            **extra: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "alembic", "-c", str(INI), *args],
                          capture_output=True, text=True, env=_env(db_url, driver, **extra),
                          cwd=ROOT, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def tables(url: str) -> set[str]:
    return {f"{s}.{t}" for s, t in rows(
        url, "SELECT table_schema, table_name FROM information_schema.tables"
             " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')")}


@pytest.mark.parametrize("driver", DRIVERS)
def test_upgrade_head_creates_outbox_schema(blank_db_url: str, driver: str) -> None:
    alembic(blank_db_url, "upgrade", "head", driver=driver)
    assert [r[0] for r in outbox_migrations(blank_db_url)] == ALL
    found = tables(blank_db_url)
    assert {"outbox.events", "outbox.deliveries", "outbox.endpoints"} <= found
    # 0002 ran in the same transaction, after outbox's SET LOCAL search_path: restored
    assert {"public.orders", "public.alembic_version"} <= found
    assert "outbox.orders" not in found
    assert rows(blank_db_url, "SELECT version_num FROM alembic_version") == [("0002_orders",)]
    before = outbox_migrations(blank_db_url)

    alembic(blank_db_url, "upgrade", "head", driver=driver)
    assert outbox_migrations(blank_db_url) == before


def test_schema_from_outbox_migrate_is_recognised(db_url: str) -> None:
    before = outbox_migrations(db_url)
    alembic(db_url, "upgrade", "head")
    assert outbox_migrations(db_url) == before
    assert "public.orders" in tables(db_url)


@pytest.mark.parametrize("driver", DRIVERS)
def test_commits_with_the_revisions_or_not_at_all(blank_db_url: str, driver: str) -> None:
    proc = alembic(blank_db_url, "upgrade", "head", driver=driver, check=False,
                   TEST_ALEMBIC_FAIL="1")
    assert proc.returncode != 0
    assert "revision 0002 failed" in proc.stderr
    assert tables(blank_db_url) == set()  # no outbox schema, no alembic_version
    assert rows(blank_db_url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'outbox'"
                ) == [(0,)]


def test_schema_from_outbox_schema_setting(blank_db_url: str) -> None:
    alembic(blank_db_url, "upgrade", "head", OUTBOX_SCHEMA="webhooks")
    assert [r[0] for r in outbox_migrations(blank_db_url, "webhooks")] == ALL
    assert not any(t.startswith("outbox.") for t in tables(blank_db_url))


def test_waits_for_the_outbox_migrate_lock(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('outbox.admin.migrations'),"
                       " hashtext('outbox'))")
        proc = subprocess.Popen([sys.executable, "-m", "alembic", "-c", str(INI), "upgrade",
                                 "head"], env=_env(blank_db_url, "psycopg"), cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_until(lambda: rows(blank_db_url, "SELECT count(*) FROM pg_locks WHERE"
                                    " locktype = 'advisory' AND NOT granted")[0][0] == 1,
                       60, "alembic to wait for the advisory lock")
        finally:
            holder.rollback()
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert [r[0] for r in outbox_migrations(blank_db_url)] == ALL


def test_offline_sql_is_refused(blank_db_url: str) -> None:
    proc = alembic(blank_db_url, "upgrade", "head", "--sql", check=False)
    assert proc.returncode != 0
    assert "use `outbox migrate --print` for the SQL" in proc.stderr


def test_docs_snippet_is_the_tested_revision() -> None:
    block = snippet("guides/migrations.md", "alembic-revision")
    revision = (ROOT / "tests" / "alembic_project" / "versions" / "0001_outbox.py").read_text()
    assert block in revision


def test_asyncpg_cursor_returns_the_rows_of_every_statement(blank_db_url: str) -> None:
    """Only the migration files it is given run as asyncpg scripts: any other statement,
    query or not, goes through the adapter's cursor, and fetchall() gives its rows."""
    script = "CREATE TABLE a (x int); CREATE TABLE b (y int)"
    seen: list[list[tuple[Any, ...]]] = []

    def run(connection: Connection) -> None:
        with contextlib.closing(_cursor(connection.connection, "asyncpg", [script])) as cur:
            for sql in ("SELECT 1", "VALUES (2)", "WITH t AS (SELECT 3) SELECT * FROM t",
                        "SHOW client_encoding", "TABLE a"):
                if sql == "TABLE a":
                    cur.execute(script)
                    seen.append([tuple(r) for r in cur.fetchall()])
                    cur.execute("INSERT INTO a VALUES (4)")
                cur.execute(sql)
                seen.append([tuple(r) for r in cur.fetchall()])

    async def main() -> None:
        url = blank_db_url.replace("postgresql://", "postgresql+asyncpg://", 1)
        engine = create_async_engine(url, poolclass=pool.NullPool)
        async with engine.connect() as connection:
            await connection.run_sync(run)
        await engine.dispose()

    asyncio.run(main())
    assert seen == [[(1,)], [(2,)], [(3,)], [("UTF8",)], [], [(4,)]]
