"""The noisy neighbour: a quiet tenant's latency while another tenant's burst drains.

    .venv/bin/python -m bench.neighbour [--events 100000] [--rate 5] [--workers 1]

Two endpoints on one :class:`bench.sink.Sink`, each subscribed to its own event type (the
claim's fairness unit is the endpoint, so this is what two tenants with an endpoint each
look like to it): tenant A's burst of ``--events`` events (``emit_many``, 1,000 per
transaction, before the workers start) and tenant B's trickle. Workers are ``--workers``
``python -m outbox worker`` processes (concurrency 100; the per-endpoint in-flight cap
raised to 100 too, so that it is the claim, not the cap, that decides who goes first).
Two runs, each on a fresh database:

- alone: the burst only; its drain rate = events / seconds from the workers' start until
  none of A's deliveries is pending.
- with the quiet tenant: the same burst while this process emits B's events one per
  transaction at ``--rate``/s from the start of the drain (A's first recorded delivery)
  until A has drained, noting
  ``time.time()`` after each commit. Reported: B's commit -> sink arrival p50/p99 (ms),
  the burst's drain rate and its ratio to the alone run.

Targets: B's p99 <= 2 s during the burst; the burst's drain rate >= 0.9x the
alone run. Human-readable lines, then one JSON line.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, percentiles, scratch_database
from bench.procs import Workers
from bench.sink import Sink
from outbox import Event
from outbox.admin import endpoints as ep

BURST_TYPE, QUIET_TYPE = "burst.event", "quiet.event"
PAYLOAD = {"total": 1999, "currency": "EUR", "customer": "cus_0123456789"}
ENV = {"OUTBOX_CONCURRENCY": "100", "OUTBOX_ENDPOINT_MAX_IN_FLIGHT": "100"}
PENDING_SQL = f"""
SELECT count(*) FROM {SCHEMA}.deliveries
 WHERE endpoint_id = %s AND state = 'pending' AND visible_at < 'infinity'"""
DEAD_SQL = f"SELECT count(*) FROM {SCHEMA}.deliveries WHERE state = 'dead'"


def _setup(url: str, sink_url: str, events: int) -> tuple[uuid.UUID, uuid.UUID]:
    """The two endpoints, and the burst emitted; returns (burst, quiet) endpoint ids."""
    with psycopg.connect(url, autocommit=True) as conn:
        burst = ep.add(conn, sink_url + "/a", schema=SCHEMA, event_types=[BURST_TYPE])
        quiet = ep.add(conn, sink_url + "/b", schema=SCHEMA, event_types=[QUIET_TYPE])
        for first in range(0, events, 1000):
            batch = [Event(BURST_TYPE, {**PAYLOAD, "id": i})
                     for i in range(first, min(events, first + 1000))]
            with conn.transaction():
                outbox.emit_many(conn, batch, schema=SCHEMA)
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.events, {SCHEMA}.deliveries")
    return burst.endpoint.id, quiet.endpoint.id


def _pending(conn: psycopg.Connection[Any], endpoint: uuid.UUID) -> int:
    row = conn.execute(PENDING_SQL, (endpoint,)).fetchone()
    return int(row[0]) if row else 0


def _drive(url: str, burst: uuid.UUID, quiet: uuid.UUID, workers: Workers, rate: float,
           timeout: float) -> tuple[float, list[tuple[str, float]]]:
    """Once A's drain has begun (a worker is up), emit B's events at ``rate``/s (none if
    0) until A has drained; (A's drain seconds from the workers' start, B's (event id,
    commit time)). Then wait for B's last ones."""
    commits: list[tuple[str, float]] = []
    start = time.perf_counter()
    next_emit, next_poll, draining = start, start, False
    with psycopg.connect(url, autocommit=True) as conn:
        total = _pending(conn, burst)
        while True:
            now = time.perf_counter()
            if rate and draining and now >= next_emit:
                with conn.transaction():
                    event_id = outbox.emit(conn, Event(QUIET_TYPE, {"n": len(commits)}),
                                           schema=SCHEMA)
                commits.append((str(event_id), time.time()))
                next_emit += 1 / rate
            if now >= next_poll:
                left = _pending(conn, burst)
                if not left:
                    break
                if not draining and left < total:
                    draining, next_emit = True, now
                if not workers.check() or now - start > timeout:
                    raise RuntimeError("the burst did not drain")
                next_poll = now + 0.25
            time.sleep(max(0.0, min(next_emit if rate else next_poll, next_poll)
                           - time.perf_counter()))
        drained = time.perf_counter() - start
        deadline = time.monotonic() + 30
        while rate and _pending(conn, quiet) and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = conn.execute(DEAD_SQL).fetchone()
    if dead and dead[0]:
        raise RuntimeError(f"{dead[0]} deliveries dead")
    return drained, commits


def run_once(events: int, rate: float, workers: int) -> dict[str, Any]:
    """One burst of ``events`` for A, with B emitting at ``rate``/s (0: A alone)."""
    with scratch_database() as url, Sink() as sink:
        burst, quiet = _setup(url, sink.url, events)
        with Workers(url, workers, ENV, drain=False) as procs:
            drained, commits = _drive(url, burst, quiet, procs, rate, 60 + events / 100)
            procs.wait(terminate=True)
    arrivals = sink.report.first_arrival
    missing = [i for i, _ in commits if i not in arrivals]
    if missing:
        raise RuntimeError(f"{len(missing)} of the quiet tenant's events never arrived")
    res: dict[str, Any] = {"events": events, "seconds": drained,
                           "deliveries_per_s": events / drained,
                           "duplicates": sink.report.duplicates}
    if commits:
        res["quiet_events"] = len(commits)
        res["quiet_latency_ms"] = percentiles([(arrivals[i] - t) * 1000 for i, t in commits])
    return res


def run(events: int, rate: float = 5.0, workers: int = 1) -> dict[str, Any]:
    """The burst alone, then with the quiet tenant; the suite's section results."""
    alone = run_once(events, 0.0, workers)
    mixed = run_once(events, rate, workers)
    return {"events": events, "rate": rate, "workers": workers, "alone": alone,
            "with_quiet": mixed, "quiet_latency_ms": mixed["quiet_latency_ms"],
            "drain_ratio": mixed["deliveries_per_s"] / alone["deliveries_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    res = run(args.events, args.rate, args.workers)
    q = res["quiet_latency_ms"]
    print(f"burst of {args.events:,} alone             {res['alone']['deliveries_per_s']:,.0f}"
          f" deliveries/s ({res['alone']['seconds']:.1f} s)")
    print(f"the same with B at {args.rate:g}/s          "
          f"{res['with_quiet']['deliveries_per_s']:,.0f} deliveries/s"
          f" ({res['with_quiet']['seconds']:.1f} s) = {res['drain_ratio']:.2f}x alone"
          " (target >= 0.9x)")
    print(f"B commit -> arrival during the burst  p50 {q['p50']:.1f}  p99 {q['p99']:.1f}"
          f"  max {q['max']:.1f} ms over {res['with_quiet']['quiet_events']} events"
          " (target p99 <= 2,000 ms)")
    emit_json("neighbour", res)


if __name__ == "__main__":
    main()
