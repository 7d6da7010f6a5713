"""A node that answers but cannot write (a standby, a demoted primary,
default_transaction_read_only): an outage with a clear message, not a crash."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import psycopg
import pytest

from outbox.delivery.store import Store
from tests.support.cli import invoke
from tests.support.workers import settings


def _read_only(server_url: str, db_url: str, on: bool) -> None:
    dbname = urlsplit(db_url).path.lstrip("/")
    action = "SET default_transaction_read_only = on" if on else \
        "RESET default_transaction_read_only"
    with psycopg.connect(server_url, autocommit=True) as c:
        c.execute(f'ALTER DATABASE "{dbname}" {action}'.encode())


def test_cli_says_read_only_and_what_to_do(server_url: str, db_url: str) -> None:
    _read_only(server_url, db_url, True)
    result = invoke(db_url, "endpoints", "add", "https://example.com/hook",
                    env={"OUTBOX_ALLOW_NETWORKS": "0.0.0.0/0"})
    assert result.exit_code == 1
    assert "is read-only" in result.output and "target_session_attrs=read-write" in result.output
    assert "Traceback" not in result.output


def test_store_waits_out_a_read_only_node(server_url: str, db_url: str,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """A claim on a read-only node waits (one log line), and succeeds on new connections
    once the node takes writes again; readiness is down meanwhile."""
    _read_only(server_url, db_url, True)

    async def main() -> None:
        store = Store(settings(db_url))
        task = asyncio.create_task(store.claim(10))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if not store.healthy:
                break
        assert not store.healthy and store.down_reason.startswith("read-only")
        assert not task.done()
        await asyncio.to_thread(_read_only, server_url, db_url, False)
        assert await asyncio.wait_for(task, 10) == []
        assert store.healthy
        await store.close()

    with caplog.at_level(logging.WARNING, logger="outbox.worker"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert sum("database unavailable (read-only" in m for m in lines) == 1, lines
    assert sum("database available again" in m for m in lines) == 1, lines


def test_reads_that_succeed_on_a_read_only_node_are_no_recovery(
        server_url: str, db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """While the claim waits out a read-only node, the gauges' reads (backlog, allowed
    rates) still succeed there: they neither turn readiness back on nor log the outage
    again; the claim's success after the node takes writes does, once."""
    _read_only(server_url, db_url, True)

    async def main() -> None:
        store = Store(settings(db_url))
        task = asyncio.create_task(store.claim(10))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if not store.healthy:
                break
        assert not store.healthy
        for _ in range(3):
            await store.backlog()
            await store.allowed_rates()
            assert not store.healthy and store.down_reason.startswith("read-only")
            await asyncio.sleep(0.3)  # the claim keeps retrying meanwhile
        assert not task.done()
        await asyncio.to_thread(_read_only, server_url, db_url, False)
        assert await asyncio.wait_for(task, 10) == []
        assert store.healthy
        await store.close()

    with caplog.at_level(logging.WARNING, logger="outbox.worker"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records]
    assert sum("database unavailable (read-only" in m for m in lines) == 1, lines
    assert sum("database available again" in m for m in lines) == 1, lines
