"""The inbox's own migration series (`outbox migrate --inbox`) and its retention
(`outbox inbox prune`)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import psycopg
import pytest

from outbox import OperationRefused
from outbox.admin.migrations import available, migrate, script
from outbox.inbox import prune
from tests.support.cli import execute, invoke
from tests.support.pg import SCHEMA

SENDER = {"endpoints", "events", "deliveries", "delivery_attempts", "schema_migrations",
          "captures", "endpoint_flow", "event_types", "event_catalog", "endpoint_repairs",
          "web_sessions_revoked", "delivery_attempt_log", "delivery_partitions",
          "event_keys", "event_partitions"}
INBOX = {"inbox", "inbox_migrations"}


def _tables(url: str) -> set[str]:
    # tables and views, not the partitions of deliveries, delivery_attempts and events
    # (they come and go: migrations/0018, 0025)
    rows = execute(url, "SELECT c.relname FROM pg_class c JOIN pg_namespace n"
                        " ON n.oid = c.relnamespace WHERE n.nspname = %s"
                        " AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition",
                   (SCHEMA,))
    return {r[0] for r in rows}


def test_receiver_only_database_gets_only_the_inbox(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert [m.name for m in migrate(c, SCHEMA, inbox=True)] == ["inbox"]
        assert migrate(c, SCHEMA, inbox=True) == []  # idempotent
    assert _tables(blank_db_url) == INBOX


def test_sender_and_inbox_share_a_schema(blank_db_url: str) -> None:
    """Each series numbers and records its own files; neither sees the other's."""
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA, inbox=True)
        assert len(migrate(c, SCHEMA)) == len(available())
        assert migrate(c, SCHEMA, inbox=True) == []
    assert _tables(blank_db_url) == SENDER | INBOX
    assert all(m.name != "inbox" for m in available())


def test_printed_inbox_script_matches_migrate(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute(script(SCHEMA, inbox=True).encode())
        assert migrate(c, SCHEMA, inbox=True) == []
    assert _tables(blank_db_url) == INBOX


def test_cli_migrate_inbox(blank_db_url: str) -> None:
    first = invoke(blank_db_url, "migrate", "--inbox")
    assert first.exit_code == 0, first.output
    assert "applied inbox_0001_inbox" in first.output
    again = invoke(blank_db_url, "migrate", "--inbox")
    assert "up to date" in again.output
    assert _tables(blank_db_url) == INBOX


def test_cli_print_inbox_needs_no_database() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", "postgresql://nobody@127.0.0.1:1/x",
         "migrate", "--print", "--inbox"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "CREATE TABLE inbox" in done.stdout
    assert "CREATE TABLE deliveries" not in done.stdout


@pytest.fixture
def aged_inbox(blank_db_url: str) -> str:
    """Inbox ids received 100 h, 80 h, 2 h and just now ago."""
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA, inbox=True)
    execute(blank_db_url, f"""
        INSERT INTO {SCHEMA}.inbox (webhook_id, received_at)
        SELECT 'msg_' || h, now() - make_interval(hours => h)
          FROM unnest(ARRAY[100, 80, 2, 0]) AS h""")
    return blank_db_url


def _ids(url: str) -> list[str]:
    return [r[0] for r in execute(url, f"SELECT webhook_id FROM {SCHEMA}.inbox ORDER BY 1")]


def test_prune_deletes_only_what_is_older(aged_inbox: str) -> None:
    with psycopg.connect(aged_inbox, autocommit=True) as c:
        result = prune(c, SCHEMA, dt.timedelta(hours=72), batch_size=1)  # batch by batch
    assert result.deleted == 2
    assert _ids(aged_inbox) == ["msg_0", "msg_2"]


def test_prune_refuses_a_window_under_the_retry_horizon(aged_inbox: str) -> None:
    with psycopg.connect(aged_inbox, autocommit=True) as c:
        with pytest.raises(OperationRefused, match="retry a webhook for up to 72 h"):
            prune(c, SCHEMA, dt.timedelta(hours=1))
        assert len(_ids(aged_inbox)) == 4
        assert prune(c, SCHEMA, dt.timedelta(hours=1), force=True).deleted == 3
    assert _ids(aged_inbox) == ["msg_0"]


def test_prune_refuses_inside_a_transaction(aged_inbox: str) -> None:
    with psycopg.connect(aged_inbox) as c:
        c.execute("SELECT 1")
        with pytest.raises(OperationRefused, match="outside a transaction"):
            prune(c, SCHEMA, dt.timedelta(hours=72))


def test_cli_inbox_prune(aged_inbox: str) -> None:
    refused = invoke(aged_inbox, "inbox", "prune", "--older-than", "24h")
    assert refused.exit_code == 1
    assert "error: refusing to prune inbox ids younger than 72 h" in refused.output
    assert "--force" in refused.output
    assert len(_ids(aged_inbox)) == 4
    done = invoke(aged_inbox, "inbox", "prune", "--older-than", "72h")
    assert done.exit_code == 0, done.output
    assert done.output.startswith("deleted 2 inbox ids received before ")
    forced = invoke(aged_inbox, "inbox", "prune", "--older-than", "1h", "--force", "--json")
    assert forced.exit_code == 0, forced.output
    assert '"deleted": 1' in forced.output
    assert _ids(aged_inbox) == ["msg_0"]


def test_cli_inbox_prune_without_the_table(blank_db_url: str) -> None:
    done = invoke(blank_db_url, "inbox", "prune", "--older-than", "7d")
    assert done.exit_code == 1
    assert "outbox migrate --inbox" in done.output
