"""Metrics, health endpoints and JSON logs of a running worker."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import psycopg
import pytest

from outbox.admin.migrations import migrate
from outbox.delivery.runner import run_worker
from outbox.delivery.settings import WorkerSettings
from outbox.testing.postgres import TempCluster
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.net import free_port
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, emit, log_of, settings, spawn, states


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _with_worker(cfg: WorkerSettings, body: Callable[[], None]) -> None:
    """Run a worker (with its health server) in a thread's event loop while ``body`` runs."""
    import threading

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        from outbox.delivery import health
        from outbox.delivery.runner import make_worker_transport
        from outbox.delivery.worker import Worker

        async with make_worker_transport(cfg) as transport:
            worker = Worker(cfg, transport)
            app = health.make_app(worker.metrics.registry, worker.ready)
            runner = await health.serve(app, cfg.metrics_port, "127.0.0.1")
            task = asyncio.create_task(worker.run())
            await stop.wait()
            worker.stop()
            await asyncio.sleep(0.3)  # readiness must read "stopping" while draining
            holder["stopping"] = await asyncio.to_thread(_get, cfg.metrics_port, "/readyz")
            await task
            await runner.cleanup()

    holder: dict[str, tuple[int, str]] = {}
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),))
    thread.start()
    try:
        body()
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
    assert holder["stopping"][0] == 503 and "stopping" in holder["stopping"][1]


def test_metrics_move_after_deliveries(db_url: str) -> None:
    port = free_port()
    cfg = settings(db_url, metrics_port=port, backlog_interval_seconds=0.2)
    with Receiver(secret=SECRET) as rx:
        rx.script("/x", [Behaviour(status=503), Behaviour(status=200)])
        endpoint = add_endpoint(db_url, rx.url + "/x")
        emit(db_url, 5)

        def check() -> None:
            deadline = time.monotonic() + 20
            while states(db_url) != {"delivered": 5} and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            assert _get(port, "/healthz") == (200, "ok\n")
            assert _get(port, "/readyz")[0] == 200
            code, text = _get(port, "/metrics")
            assert code == 200
            assert _metric(text, "outbox_deliveries_total", outcome="delivered",
                           endpoint=str(endpoint)) == 5
            assert _metric(text, "outbox_deliveries_total", outcome="retry") == 1
            assert _metric(text, "outbox_attempt_duration_seconds_count") == 6
            assert _metric(text, "outbox_delivery_lag_seconds_count") == 5
            assert _metric(text, "outbox_claimed_per_poll_sum") == 6
            assert _metric(text, "outbox_due_backlog") == 0
            assert "outbox_in_flight" in text and "outbox_database_errors_total" in text

        _with_worker(cfg, check)


@pytest.mark.slow
def test_readyz_fails_while_database_is_down(own_cluster: TempCluster) -> None:
    with psycopg.connect(own_cluster.url, autocommit=True) as c:
        migrate(c, SCHEMA)
    port = free_port()
    cfg = settings(own_cluster.url, metrics_port=port, poll_interval_seconds=0.1)

    def check() -> None:
        time.sleep(0.5)
        assert _get(port, "/readyz")[0] == 200
        own_cluster.stop("fast")
        deadline = time.monotonic() + 15
        while _get(port, "/readyz")[0] != 503 and time.monotonic() < deadline:
            time.sleep(0.2)
        status, text = _get(port, "/readyz")
        assert (status, text) == (503, "database unavailable\n")
        assert _get(port, "/healthz")[0] == 200  # alive: do not restart it for this
        errors = _metric(_get(port, "/metrics")[1], "outbox_database_errors_total")
        assert errors >= 1
        own_cluster.start()
        deadline = time.monotonic() + 30
        while _get(port, "/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _get(port, "/readyz")[0] == 200

    _with_worker(cfg, check)


def test_json_logs_carry_ids_and_no_secret(db_url: str) -> None:
    with Receiver(default=Behaviour(status=500)) as rx:
        add_endpoint(db_url, rx.url + "/x", max_attempts=1)
        ids = emit(db_url, 2)
        proc = spawn(db_url, "--drain", OUTBOX_LOG_FORMAT="json")
        proc.wait(60)
    text = log_of(proc)
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    deliveries = [r for r in lines if r.get("msg", "").startswith("delivery ")]
    assert {r["event_id"] for r in deliveries} == {str(i) for i in ids}
    for r in deliveries:
        assert {"delivery_id", "endpoint_id", "attempt", "outcome", "duration_ms",
                "level", "ts"} <= set(r)
        assert r["outcome"] == "exhausted"
    assert SECRET not in text and SECRET[6:] not in text
    assert '"n":' not in text  # payloads are not logged


def test_worker_refuses_a_busy_metrics_port(db_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = settings(db_url, metrics_port=port, metrics_host="127.0.0.1")
        from outbox import ConfigurationError

        with pytest.raises(ConfigurationError, match="OUTBOX_METRICS_PORT"):
            asyncio.run(run_worker(cfg))
