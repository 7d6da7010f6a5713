"""Fairness: nine healthy endpoints' throughput while a tenth hangs or fails.

    .venv/bin/python -m bench.fairness [--events 1500]

Ten endpoints subscribed to every event; ``--events`` events make ten deliveries each.
One worker process (concurrency 100, HTTP timeout 5 s). Three runs on fresh databases:
all ten healthy; the tenth hanging until the timeout on every request; the tenth answering
500 to everything. Reported: the nine healthy endpoints' deliveries/s (until all of theirs
are delivered) and the ratio to the all-healthy run. Target: at least 0.9.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from bench.procs import Workers
from bench.sink import Sink
from outbox.admin import endpoints as ep

HEALTHY_DONE = """
SELECT count(*) FROM outbox.deliveries
 WHERE state = 'delivered' AND endpoint_id = ANY (%s)
"""


def run(events: int, tenth: str) -> float:
    """The nine healthy endpoints' deliveries/s with the tenth at path ``tenth``."""
    with scratch_database() as url, Sink() as sink:
        with psycopg.connect(url, autocommit=True) as c:
            healthy = [ep.add(c, f"{sink.url}/ok{i}", schema=SCHEMA).endpoint.id
                       for i in range(9)]
            ep.add(c, f"{sink.url}{tenth}", schema=SCHEMA)
        with psycopg.connect(url) as c:
            for start in range(0, events, 500):
                n = min(500, events - start)
                outbox.emit_many(c, [outbox.Event("x", {"i": start + i}) for i in range(n)])
            c.commit()
        env = {"OUTBOX_CONCURRENCY": "100", "OUTBOX_HTTP_TIMEOUT_SECONDS": "5",
               "OUTBOX_LEASE_SECONDS": "30"}
        with Workers(url, 1, env, drain=False) as workers, psycopg.connect(url) as c:
            started = time.monotonic()
            while True:
                row = c.execute(HEALTHY_DONE, (healthy,)).fetchone()
                c.commit()
                if row and row[0] >= 9 * events:
                    break
                if not workers.check() or time.monotonic() - started > 600:
                    raise RuntimeError("fairness run did not finish")
                time.sleep(0.1)
            return 9 * events / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1500)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name, path in (("all healthy", "/ok9"), ("one hanging", "/hang"),
                       ("one failing (500)", "/fail")):
        results[name] = run(args.events, path)
        ratio = results[name] / results["all healthy"]
        print(f"{name:<20} nine healthy endpoints: {results[name]:,.0f} deliveries/s"
              f"  ({ratio:.2f}x the all-healthy run)")
    emit_json("fairness", results)


if __name__ == "__main__":
    main()
