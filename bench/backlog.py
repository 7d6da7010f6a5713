"""A backlog to drain: one endpoint, N emitted events, and a wait until all are delivered
(shared by ``bench.deliver``, ``bench.cpu``, ``bench.processes``, ``bench.brokers`` and
``bench.ordering``)."""

from __future__ import annotations

import time

import psycopg

import outbox
from bench.common import SCHEMA
from bench.procs import CpuMeter, Workers
from outbox import Event
from outbox.admin import endpoints as ep

__all__ = ["PAYLOAD", "PROGRESS_SQL", "add_endpoint", "emit_backlog", "wait_delivered"]

PAYLOAD = {"id": 0, "total": 1999, "currency": "EUR", "customer": "cus_0123456789"}
PROGRESS_SQL = f"""
SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state = 'dead'),
       count(*), (SELECT array_agg(pid) FROM pg_stat_activity
                   WHERE datname = current_database())
  FROM {SCHEMA}.deliveries"""


def add_endpoint(url: str, sink_url: str, signature: str = "hmac") -> None:
    """One endpoint for every event, delivering to ``sink_url`` + ``/hook``."""
    with psycopg.connect(url, autocommit=True) as conn:
        ep.add(conn, sink_url + "/hook", schema=SCHEMA, signature=signature)


def emit_backlog(url: str, n: int) -> None:
    """``n`` events, 1,000 per transaction (``emit_many``), then VACUUM ANALYZE."""
    with psycopg.connect(url, autocommit=True) as conn:
        for first in range(0, n, 1000):
            events = [Event("order.created", {**PAYLOAD, "id": i})
                      for i in range(first, min(n, first + 1000))]
            with conn.transaction():
                outbox.emit_many(conn, events, schema=SCHEMA)
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.events, {SCHEMA}.deliveries")


def wait_delivered(url: str, expected: int, workers: Workers, meter: CpuMeter,
                    timeout: float) -> None:
    """Poll until ``expected`` deliveries are delivered, sampling ``meter`` meanwhile."""
    deadline = time.monotonic() + timeout
    next_sample = 0.0
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(PROGRESS_SQL).fetchone()
            assert row is not None
            delivered, dead, total, backends = row
            if delivered >= expected or time.monotonic() >= next_sample:
                meter.sample(backends or ())
                next_sample = time.monotonic() + 0.25
            if delivered >= expected:
                return
            running = workers.check()
            if dead or not running or time.monotonic() > deadline:
                raise RuntimeError(f"{delivered}/{expected} delivered, {dead} dead, {total}"
                                   f" rows; workers running: {running}")
            time.sleep(0.05)
