"""Wake on commit: what it buys and what emitters pay for it.

    .venv/bin/python -m bench.wakeup [--quick]

- ``latency``: lone events 250 ms apart into an idle worker (a separate process, the
  local sink): emit-commit to arrival p50/p90, ``OUTBOX_WAKEUP=notify`` (default poll
  fallback 5 s) vs ``poll`` (default 0.05 s).
- ``idle``: transactions per second an idle worker costs its database (xact_commit +
  xact_rollback deltas of a scratch database nothing else uses), notify vs poll.
- ``emit``: committed transactions/s of 16 concurrent emitting connections, one event
  per transaction and 100-event ``emit_many`` transactions, for three designs:
  ``off`` (OUTBOX_WAKEUP=poll: no wake-up SQL), ``sentinel, workers busy`` (the shipped
  design with no worker idle: each transaction takes a shared advisory lock, no NOTIFY)
  and ``notify every transaction`` (the shipped design with an idle sentinel that never
  goes busy: every transaction NOTIFYs, which is also what the plain
  one-NOTIFY-per-transaction design costs all the time).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any

import psycopg

import outbox
from bench.backlog import add_endpoint
from bench.common import SCHEMA, emit_json, scratch_database
from bench.procs import Workers
from outbox._db.connection import render
from outbox.delivery import queries as wq
from outbox.settings import Settings


def _lone_latency(mode: str, seconds: float) -> dict[str, Any]:
    from bench import deliver
    res = deliver.latency(4.0, seconds, {"OUTBOX_WAKEUP": mode}, None)
    return {"mode": mode, "latency_ms": res["latency_ms"], "events": res["events"]}


def _xacts(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database"
                        " WHERE datname = current_database()").fetchone()
        return int(row[0]) if row else 0


def _idle_cost(mode: str, seconds: float) -> float:
    with scratch_database() as url, \
            Workers(url, 1, {"OUTBOX_WAKEUP": mode}, drain=False) as workers:
        time.sleep(3.0)  # started, connected, armed; stats flushed
        before = _xacts(url)
        time.sleep(seconds)
        after = _xacts(url)
        workers.wait(terminate=True)
    return (after - before - 1) / seconds  # minus our own first reading


def _emitters(url: str, mode: str, batch: int, seconds: float, n: int = 16) -> float:
    s = Settings(database_url=url, schema_name=SCHEMA, wakeup=mode)  # type: ignore[arg-type]
    stop = time.monotonic() + seconds
    counts = [0] * n
    events = [outbox.Event("order.created", {"id": 1})] * batch

    def run(i: int) -> None:
        with psycopg.connect(url) as c:
            while time.monotonic() < stop:
                if batch == 1:
                    outbox.emit(c, events[0], settings=s)
                else:
                    outbox.emit_many(c, events, settings=s)
                c.commit()
                counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def emit_designs(seconds: float, repeat: int) -> dict[str, Any]:
    """Transactions/s of 16 emitters per design, interleaved runs; the medians."""
    res: dict[str, Any] = {}
    with scratch_database() as url:
        add_endpoint(url, "http://127.0.0.1:9")  # never called: emit only
        for batch in (1, 100):
            runs: dict[str, list[float]] = {"off": [], "sentinel, workers busy": [],
                                            "notify every transaction": []}
            for _ in range(repeat):
                runs["off"].append(_emitters(url, "poll", batch, seconds))
                runs["sentinel, workers busy"].append(_emitters(url, "notify", batch, seconds))
                with psycopg.connect(url, autocommit=True) as idle:
                    idle.execute(render(wq.WAKE_LISTEN, SCHEMA))
                    idle.execute(render(wq.WAKE_ARM, SCHEMA))
                    runs["notify every transaction"].append(
                        _emitters(url, "notify", batch, seconds))
            med = {k: sorted(v)[len(v) // 2] for k, v in runs.items()}
            res[f"batch_{batch}"] = {"tx_per_s": med, "runs": runs, "ratio_vs_off": {
                k: v / med["off"] for k, v in med.items()}}
    return res


def run(quick: bool = False) -> dict[str, Any]:
    seconds = 3.0 if quick else 10.0
    return {
        "latency": {m: _lone_latency(m, seconds) for m in ("notify", "poll")},
        "idle_tx_per_s": {m: _idle_cost(m, seconds) for m in ("notify", "poll")},
        "emit_16": emit_designs(2.0 if quick else 5.0, 1 if quick else 3),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    res = run(parser.parse_args().quick)
    for m, lat in res["latency"].items():
        q = lat["latency_ms"]
        print(f"lone events, {m:6}: p50 {q['p50']:.1f} ms  p90 {q['p90']:.1f} ms")
    for m, v in res["idle_tx_per_s"].items():
        print(f"idle worker, {m:6}: {v:.2f} transactions/s")
    for b, r in res["emit_16"].items():
        print(f"16 emitters, {b}: " + "  ".join(
            f"{k} {v:,.0f}/s ({r['ratio_vs_off'][k]:.2f}x)" for k, v in r["tx_per_s"].items()))
    emit_json("wakeup", res)


if __name__ == "__main__":
    main()
