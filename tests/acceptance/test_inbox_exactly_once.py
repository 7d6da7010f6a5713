"""End to end: at-least-once delivery plus the inbox gives exactly-once effects.

A Flask receiver built with outbox.contrib.flask counts its side effects in the same
transaction as the inbox id. It stalls its answer, *after* committing, past the worker's
HTTP timeout for every fourth event, so the worker retries ids whose effect already
happened; and the first worker process is SIGKILLed mid-flight, so the ids it held are
delivered again after their lease. Every event's effect must happen exactly once, and none
may be missed.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask, g, request
from werkzeug.serving import make_server

from outbox.contrib.flask import webhook_view
from outbox.inbox import Received
from tests.support.inbox import SECRET, prepare_receiver_db, scalar
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, emit, spawn, states, wait_until

pytestmark = pytest.mark.slow  # worker processes, a SIGKILL, stalled answers

EVENTS = 200
STALL_SECONDS = 2.5  # past OUTBOX_HTTP_TIMEOUT_SECONDS below
WORKER_ENV = {"OUTBOX_HTTP_TIMEOUT_SECONDS": "1", "OUTBOX_LEASE_SECONDS": "3",
              "OUTBOX_POLL_INTERVAL_SECONDS": "0.05", "OUTBOX_RETRY_BASE_SECONDS": "0.1",
              "OUTBOX_RETRY_CAP_SECONDS": "0.5", "OUTBOX_CONCURRENCY": "20"}


class Receiver:
    """The receiving service: effects counted in its own database, arrivals in memory."""

    def __init__(self, url: str) -> None:
        self.arrivals: collections.Counter[str] = collections.Counter()
        self.stalled: set[str] = set()
        self._lock = threading.Lock()
        self.app = self._app(url)

    def _app(self, url: str) -> Flask:
        app = Flask(__name__)

        @webhook_view(SECRET, lambda: psycopg.connect(url), schema=SCHEMA)
        def process(event: Received, conn: psycopg.Connection[Any]) -> str:
            conn.execute("INSERT INTO effects VALUES (%s, %s)",
                         (event.webhook_id, event.body.decode()))
            g.stall = event.payload["n"] % 4 == 0
            return "ok"

        @app.post("/hooks")
        def hooks() -> Any:
            with self._lock:
                self.arrivals[request.headers.get("webhook-id", "")] += 1
            answer = process()  # committed (or a duplicate) by now
            if g.get("stall"):
                with self._lock:
                    self.stalled.add(request.headers["webhook-id"])
                time.sleep(STALL_SECONDS)  # the worker gives up first and will retry
            return answer

        return app


@pytest.fixture
def receiver(blank_db_url: str) -> Iterator[tuple[Receiver, str, str]]:
    rx = Receiver(prepare_receiver_db(blank_db_url))
    server = make_server("127.0.0.1", 0, rx.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rx, f"http://127.0.0.1:{server.server_port}/hooks", blank_db_url
    finally:
        server.shutdown()
        thread.join(30)


def effects(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM effects"))


def test_every_effect_exactly_once_through_sigkill_and_timeouts(
        db_url: str, receiver: tuple[Receiver, str, str]) -> None:
    rx, hook_url, rx_db = receiver
    add_endpoint(db_url, hook_url)
    ids = {str(i) for i in emit(db_url, EVENTS)}
    victim = spawn(db_url, **WORKER_ENV)
    try:
        wait_until(lambda: effects(rx_db) >= EVENTS // 4, 60, "a quarter processed")
        victim.kill()  # SIGKILL mid-flight: no cleanup, leases left behind
        victim.wait(30)
        survivor = spawn(db_url, **WORKER_ENV)
        try:
            wait_until(lambda: states(db_url) == {"delivered": EVENTS}, 180, "all delivered")
        finally:
            survivor.kill()
            survivor.wait(30)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(30)
    with psycopg.connect(rx_db) as c:
        rows = c.execute("SELECT webhook_id, count(*) FROM effects GROUP BY 1").fetchall()
    per_id: dict[str, int] = dict(rows)
    assert set(per_id) == ids, "an event was missed"
    assert set(per_id.values()) == {1}, "an effect happened twice"
    assert int(scalar(rx_db, f"SELECT count(*) FROM {SCHEMA}.inbox")) == EVENTS
    repeated = {i for i, n in rx.arrivals.items() if n > 1}
    assert rx.stalled and rx.stalled <= repeated, "every timed-out id arrived again"
