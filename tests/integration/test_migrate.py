"""Migrations: ordered, recorded, idempotent, safe when run concurrently."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest

from outbox import MigrationError
from outbox.admin.migrations import available, migrate, script


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as c:
        rows = c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            # partitions of deliveries and delivery_attempts (migration 0018) and of events
            # (0025) come and go
            " AND table_name !~ '^(deliveries|delivery_attempts|events)_(p[0-9]+|legacy|default)$'",
            (schema,)
        ).fetchall()
    return {r[0] for r in rows}


EXPECTED = {"endpoints", "events", "deliveries", "delivery_attempts", "schema_migrations",
            "captures",  # a view (migration 0011)
            "delivery_attempt_log",  # a view (migration 0019)
            "event_types", "event_catalog", "endpoint_flow", "endpoint_repairs",
            "web_sessions_revoked",
            "delivery_partitions",  # the partitions' bounds and times (migration 0018)
            "event_keys", "event_partitions"}  # idempotency keys, events' partitions (0025)


def test_second_run_is_a_no_op(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert [m.version for m in migrate(c, "outbox")] == [m.version for m in available()]
        assert migrate(c, "outbox") == []
    assert _tables(blank_db_url, "outbox") == EXPECTED


def test_custom_schema(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, "webhooks")
    assert _tables(blank_db_url, "webhooks") == EXPECTED
    assert _tables(blank_db_url, "outbox") == set()


def test_concurrent_runs_apply_once(blank_db_url: str) -> None:
    results: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            with psycopg.connect(blank_db_url, autocommit=True) as c:
                barrier.wait()
                results.append(len(migrate(c, "outbox")))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert sorted(results) == [0, 0, 0, len(available())]


def test_changed_migration_is_reported(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, "outbox")
        c.execute("UPDATE outbox.schema_migrations SET checksum = 'x' WHERE version = 1")
        with pytest.raises(MigrationError, match="changed after it was applied"):
            migrate(c, "outbox")


def test_printed_script_matches_migrate(blank_db_url: str) -> None:
    """A DBA applying ``--print`` output gets the same schema, and migrate agrees."""
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute(script("outbox").encode())
        assert migrate(c, "outbox") == []
    assert _tables(blank_db_url, "outbox") == EXPECTED


def test_print_needs_no_database() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", "postgresql://nobody@127.0.0.1:1/x",
         "migrate", "--print"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "CREATE TABLE deliveries" in done.stdout
    assert "WHERE state = 'pending'" in done.stdout


def test_claim_index_exists(db_url: str, conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'outbox'"
        " AND indexname = 'deliveries_due'"
    ).fetchone()
    assert row is not None
    assert "(visible_at) WHERE (state = 'pending'::text)" in str(row[0])
