"""Worker memory with 1,000 requests in flight.

    .venv/bin/python -m bench.memory [--in-flight 1000] [--hold 5]

One ``outbox worker`` process (``OUTBOX_CONCURRENCY`` and the endpoint cap set to
``--in-flight``) claims ``--in-flight`` deliveries to a receiver that holds every request
for ``--hold`` seconds; the worker's resident set size (VmRSS) is sampled while they are
all in flight, beside its RSS when idle. Target: under 200 MB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from outbox.admin import endpoints as ep
from outbox.testing.receiver import Behaviour, Receiver


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def measure(url: str, n: int, hold: float) -> dict[str, float]:
    with Receiver(default=Behaviour(delay=hold)) as rx:
        with psycopg.connect(url, autocommit=True) as c:
            ep.add(c, rx.url + "/slow", schema=SCHEMA)
        env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA,
               "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", "OUTBOX_CONCURRENCY": str(n),
               "OUTBOX_ENDPOINT_MAX_IN_FLIGHT": str(n), "OUTBOX_BATCH_SIZE": "500",
               "OUTBOX_METRICS_PORT": "0", "OUTBOX_HTTP_TIMEOUT_SECONDS": str(hold + 20)}
        proc = subprocess.Popen([sys.executable, "-m", "outbox", "worker"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)
            idle = _rss_mb(proc.pid)
            with psycopg.connect(url) as c:
                outbox.emit_many(c, [outbox.Event("x", {"i": i}) for i in range(n)])
                c.commit()
            peak, deadline = 0.0, time.monotonic() + hold + 30
            while len(rx.received) < n and time.monotonic() < deadline:
                peak = max(peak, _rss_mb(proc.pid))
                time.sleep(0.1)
            in_flight = len(rx.received)
            for _ in range(int(hold * 5)):
                peak = max(peak, _rss_mb(proc.pid))
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(60)
    return {"in_flight_reached": in_flight, "idle_rss_mb": idle, "peak_rss_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--hold", type=float, default=5.0)
    args = parser.parse_args()
    with scratch_database() as url:
        res = measure(url, args.in_flight, args.hold)
    print(f"requests in flight at once      {res['in_flight_reached']:,.0f}")
    print(f"worker RSS idle / peak          {res['idle_rss_mb']:.0f} MB / "
          f"{res['peak_rss_mb']:.0f} MB (target < 200 MB)")
    emit_json("memory", res)


if __name__ == "__main__":
    main()
