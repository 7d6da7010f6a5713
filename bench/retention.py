"""Queue table size under sustained load with the worker's pruning on.

    .venv/bin/python -m bench.retention [--rate 800] [--seconds 180] [--retention 5]

One worker process (``OUTBOX_RETENTION_SECONDS=--retention``, pruning every second)
delivers to a local sink while this process emits ``--rate`` events/s (batches of
``--rate/4`` every 0.25 s). Every 10 s it samples the total size of ``deliveries`` (heap +
indexes + TOAST), its live rows, ``delivery_attempts`` and ``events``. "Flat" means the
size over the last third of the run is no larger than over the middle third (ratio <= ~1.1):
pruning plus autovacuum (migration 0001's low scale factors) reuse the space.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from bench.procs import Workers
from bench.sink import Sink
from outbox.admin import endpoints as ep

SAMPLE = """
SELECT pg_total_relation_size('outbox.deliveries'),
       (SELECT count(*) FROM outbox.deliveries),
       (SELECT count(*) FROM outbox.delivery_attempts),
       (SELECT count(*) FROM outbox.events),
       (SELECT autovacuum_count FROM pg_stat_user_tables
         WHERE relid = 'outbox.deliveries'::regclass)
"""


def run(url: str, rate: int, seconds: float, retention: float) -> dict[str, Any]:
    env = {"OUTBOX_RETENTION_SECONDS": str(retention), "OUTBOX_PRUNE_INTERVAL_SECONDS": "1",
           "OUTBOX_LOG_LEVEL": "WARNING"}
    samples: list[dict[str, float]] = []
    with Sink() as sink, Workers(url, 1, env, drain=False) as workers:
        with psycopg.connect(url, autocommit=True) as c:
            ep.add(c, sink.url + "/r", schema=SCHEMA)
        start = next_sample = time.monotonic()
        n = 0
        with psycopg.connect(url) as conn:
            while (now := time.monotonic()) - start < seconds:
                outbox.emit_many(conn, [outbox.Event("x", {"i": n + i}) for i in range(rate // 4)])
                conn.commit()
                n += rate // 4
                if now >= next_sample:
                    row = conn.execute(SAMPLE).fetchone() or (0, 0, 0, 0, 0)
                    size, live, attempts, events, vacuums = row
                    conn.commit()
                    samples.append({"t": round(now - start, 1), "mb": size / 2**20, "live": live,
                                    "attempts": attempts, "events": events,
                                    "autovacuums": vacuums})
                    print(f"t={now - start:5.1f}s  deliveries {size / 2**20:6.1f} MB  "
                          f"live rows {live:>7,}  attempts {attempts:>7,}  events {events:>7,}"
                          f"  autovacuums {vacuums}")
                    next_sample += 10
                time.sleep(max(0.0, 0.25 - (time.monotonic() - now)))
        workers.check()
    third = max(1, len(samples) // 3)
    middle = statistics.mean(s["mb"] for s in samples[third:2 * third])
    last = statistics.mean(s["mb"] for s in samples[2 * third:])
    return {"emitted": n, "samples": samples, "middle_mb": middle, "last_mb": last,
            "growth_last_vs_middle": last / middle if middle else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=800)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--retention", type=float, default=5.0)
    args = parser.parse_args()
    with scratch_database() as url:
        res = run(url, args.rate, args.seconds, args.retention)
    print(f"emitted {res['emitted']:,}; deliveries size middle third {res['middle_mb']:.1f} MB,"
          f" last third {res['last_mb']:.1f} MB ({res['growth_last_vs_middle']:.2f}x)")
    emit_json("retention", res)


if __name__ == "__main__":
    main()
