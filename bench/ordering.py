"""Ordered delivery per key: drain rate of an ordered endpoint vs an unordered
one, and the rate of a single hot key.

    .venv/bin/python -m bench.ordering [--events 10000] [--keys 1000] [--hot 500]
        [--concurrency 50] [--workers 1] [--repeat 2] [--analyze]

Each measurement gets a fresh scratch database, one endpoint (ordered or not) and a fresh
:class:`bench.sink.Sink` (200 at once). ``--events`` events with keys spread round-robin
over ``--keys`` keys are emitted first (``emit_many``, 1,000 per transaction), then
``--workers`` worker processes start (``OUTBOX_CONCURRENCY`` and the endpoint's in-flight
cap = ``--concurrency``); the clock runs from their start until the database shows every
delivery delivered (the tables are vacuumed, not analysed, before: see ``--analyze``).
Ordered and unordered runs alternate (``--repeat`` pairs, same
process, same machine), so both sides see the same machine noise; the ratio is of the
medians. The hot key: ``--hot`` events of one key to an ordered endpoint: strictly one
request at a time, so its rate is one over (claim + request + completion) round trips.

The criterion: ordered >= 0.8x unordered with 10,000 events over 1,000 keys.
Also CPU seconds per 1,000 deliveries, database and workers (from ``/proc``, as
bench.deliver): on a shared machine the rates swing with other load, the database's CPU
per delivery much less.
Human-readable lines, then one JSON line (``bench.common.emit_json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import psycopg

import outbox
from bench.backlog import wait_delivered
from bench.common import SCHEMA, emit_json, scratch_database
from bench.procs import CpuMeter, Workers
from bench.sink import Sink
from outbox import Event
from outbox.admin import endpoints as ep

PAYLOAD = {"id": 0, "total": 1999, "currency": "EUR", "status": "paid"}

def _prepare(url: str, sink_url: str, *, ordered: bool, events: int, keys: int,
             concurrency: int, analyze: bool) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        ep.add(conn, sink_url + "/hook", schema=SCHEMA, ordered=ordered,
               max_in_flight=concurrency)
        for first in range(0, events, 1000):
            batch = [Event("order.updated", {**PAYLOAD, "id": i}, key=f"order-{i % keys}")
                     for i in range(first, min(events, first + 1000))]
            with conn.transaction():
                outbox.emit_many(conn, batch, schema=SCHEMA)
        # No ANALYZE by default: right after a bulk emit to an ordered endpoint every row is
        # 'fresh', and statistics that saw no 'pending' row make the claim's ring pick
        # deliveries_due plus a sort over every due row (--analyze shows that case).
        conn.execute(f"VACUUM {'ANALYZE ' if analyze else ''}{SCHEMA}.events,"
                     f" {SCHEMA}.deliveries")


def drain_rate(*, ordered: bool, events: int, keys: int, concurrency: int,
               workers: int = 1, analyze: bool = False, timeout: float = 600.0
               ) -> dict[str, Any]:
    """One measurement: deliveries/s from the workers' start until all are delivered, and
    CPU seconds per 1,000 deliveries by role (``pg_db``: the scratch database's backends,
    the figure least disturbed by other work on the machine)."""
    env = {"OUTBOX_CONCURRENCY": str(concurrency)}
    with scratch_database() as url, Sink() as sink:
        _prepare(url, sink.url, ordered=ordered, events=events, keys=keys,
                 concurrency=concurrency, analyze=analyze)
        meter = CpuMeter()
        started = time.perf_counter()
        with Workers(url, workers, env, drain=False) as procs:
            wait_delivered(url, events, procs, meter, timeout)
            seconds = time.perf_counter() - started
            meter.sample()
            cpu = meter.split({"workers": procs.pids(), "sink": {sink.pid or -1},
                               "bench": {os.getpid()}})
    report = sink.report
    per_1000 = {role: round(cpu[role] * 1000 / events, 3) for role in ("pg_db", "workers")}
    return {"ordered": ordered, "events": events, "keys": keys, "seconds": seconds,
            "per_second": events / seconds, "duplicates": report.duplicates,
            "cpu_seconds_per_1000": per_1000, "machine_busy": cpu["machine_busy_fraction"]}


def run(events: int = 10_000, keys: int = 1_000, hot: int = 500, concurrency: int = 50,
        workers: int = 1, repeat: int = 2, analyze: bool = False, out: Any = sys.stdout
        ) -> dict[str, Any]:
    """The suite's entry point (bench.suite): alternating ordered/unordered drains, then the
    hot key. Returns the medians, their ratio, the hot key's rate and every run."""
    runs: dict[str, list[dict[str, Any]]] = {"unordered": [], "ordered": []}
    for i in range(repeat):
        sides = ("unordered", "ordered") if i % 2 == 0 else ("ordered", "unordered")
        for side in sides:
            res = drain_rate(ordered=side == "ordered", events=events, keys=keys,
                             concurrency=concurrency, workers=workers, analyze=analyze)
            runs[side].append(res)
            cpu = res["cpu_seconds_per_1000"]
            print(f"{side:>9}: {events} events over {keys} keys in {res['seconds']:.2f} s"
                  f" = {res['per_second']:.0f}/s; CPU s per 1,000: database"
                  f" {cpu['pg_db']:.3f}, workers {cpu['workers']:.3f}"
                  f" (machine busy {res['machine_busy']:.0%})", file=out)
    medians = {side: statistics.median(r["per_second"] for r in rs) for side, rs in runs.items()}
    ratio = medians["ordered"] / medians["unordered"]
    db = {side: statistics.median(r["cpu_seconds_per_1000"]["pg_db"] for r in rs)
          for side, rs in runs.items()}
    print(f"ordered / unordered: {ratio:.2f}x (criterion >= 0.8x); database CPU per"
          f" delivery {db['ordered'] / db['unordered']:.2f}x", file=out)
    single = drain_rate(ordered=True, events=hot, keys=1, concurrency=concurrency,
                        workers=workers)
    print(f"one hot key: {hot} events in {single['seconds']:.2f} s = "
          f"{single['per_second']:.0f}/s (one request at a time)", file=out)
    return {"events": events, "keys": keys, "concurrency": concurrency, "workers": workers,
            "unordered_per_second": medians["unordered"],
            "ordered_per_second": medians["ordered"], "ratio": ratio,
            "db_cpu_per_1000": db,
            "hot_key_per_second": single["per_second"], "runs": runs, "hot_key": single}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--hot", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--analyze", action="store_true",
                    help="VACUUM ANALYZE after the emit (stale statistics for the claim)")
    args = ap.parse_args()
    result = run(args.events, args.keys, args.hot, args.concurrency, args.workers, args.repeat,
                 args.analyze)
    emit_json("ordering", result)


if __name__ == "__main__":
    main()
