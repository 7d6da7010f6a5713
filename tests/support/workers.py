"""Helpers for delivery tests: settings, endpoints, emitting, running workers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

import psycopg

import outbox
from outbox.admin import endpoints as ep
from outbox.delivery.runner import run_worker
from outbox.delivery.settings import WorkerSettings
from tests.support.pg import SCHEMA

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# a worker process that polls and retries fast (tests wait on it): env for spawn()
FAST = {"OUTBOX_POLL_INTERVAL_SECONDS": "0.05", "OUTBOX_RETRY_BASE_SECONDS": "0.1",
        "OUTBOX_RETRY_CAP_SECONDS": "0.5"}


def settings(db_url: str, **overrides: Any) -> WorkerSettings:
    base: dict[str, Any] = {
        "database_url": db_url, "schema_name": SCHEMA, "allow_networks": "127.0.0.0/8",
        "lease_seconds": 5.0, "http_timeout_seconds": 2.0, "poll_interval_seconds": 0.05,
        "retry_base_seconds": 0.05, "retry_cap_seconds": 0.2, "shutdown_grace_seconds": 2.0,
        "metrics_port": 0,
    }
    base.update(overrides)
    return WorkerSettings(**base)


def add_endpoint(db_url: str, url: str, **kwargs: Any) -> uuid.UUID:
    kwargs.setdefault("secret", SECRET)
    with psycopg.connect(db_url, autocommit=True) as c:
        return ep.add(c, url, schema=SCHEMA, **kwargs).endpoint.id


def emit(db_url: str, n: int, event_type: str = "test.event") -> list[uuid.UUID]:
    with psycopg.connect(db_url) as c:
        ids = outbox.emit_many(c, [outbox.Event(event_type, {"n": i}) for i in range(n)])
        c.commit()
    return ids


def drain(cfg: WorkerSettings) -> dict[str, int]:
    """Run one in-process worker until nothing is due."""
    return asyncio.run(run_worker(cfg, drain=True))


def run_until(cfg: WorkerSettings, done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Run one in-process worker until ``done()`` (checked from a thread) or timeout.

    The condition must hold while the worker runs: stopping may change what it looks at
    (held rows are handed back, a request still in flight records its retry)."""

    async def main() -> bool:
        from outbox.delivery.sender import make_transport
        from outbox.delivery.worker import Worker

        async with make_transport() as transport:
            worker = Worker(cfg, transport)
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + timeout
            reached = False
            while not (reached := await asyncio.to_thread(done)):
                if time.monotonic() > deadline or task.done():
                    break
                await asyncio.sleep(0.05)
            worker.stop()
            await task
            return reached

    assert asyncio.run(main()), "condition not reached before the timeout"


def rows(db_url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as c:
        return c.execute(query.encode(), params).fetchall()


def states(db_url: str) -> dict[str, int]:
    query = "SELECT state, count(*) FROM outbox.deliveries GROUP BY 1"
    return {state: n for state, n in rows(db_url, query)}


_LOGS: dict[int, IO[bytes]] = {}


def spawn(db_url: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    """An ``outbox worker`` process (the real entry point); its stderr goes to a temporary
    file (a pipe nobody reads would fill up and block the worker's logging)."""
    full = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA,
            "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", "OUTBOX_METRICS_PORT": "0",
            "OUTBOX_LOG_FORMAT": "text", **env}
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
    proc = subprocess.Popen([sys.executable, "-m", "outbox", "worker", *args], env=full,
                            stdout=subprocess.DEVNULL, stderr=log)
    _LOGS[proc.pid] = log
    return proc


def log_of(proc: subprocess.Popen[bytes]) -> str:
    """Everything the worker process wrote to stderr so far."""
    log = _LOGS[proc.pid]
    log.seek(0)
    return log.read().decode(errors="replace")


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` every 50 ms; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
