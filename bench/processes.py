"""One ``outbox worker --processes auto`` against separate worker processes, same backlog.

    .venv/bin/python -m bench.processes [--events 20000] [--concurrency 100]
        [--separate N] [--repeat 1]

Each run gets a fresh scratch database with one endpoint (``OUTBOX_ENDPOINT_MAX_IN_FLIGHT``
raised to the whole concurrency, as in the suite's throughput section), ``--events``
deliveries due, and
a fresh :class:`bench.sink.Sink`. Then it is drained either by one
``outbox worker --drain --processes auto`` (a supervisor and one worker process per CPU
this process may use) or by ``--separate`` plain ``outbox worker --drain`` processes
(default: as many as ``auto`` starts, so both kinds run the same number of workers),
``OUTBOX_CONCURRENCY=--concurrency`` each. The two kinds alternate ``--repeat`` times.

- deliveries/s: from the start of the processes (start-up included) until the database
  shows every delivery ``delivered``.
- worker CPU per delivery: user + system time of the whole process tree (supervisor and
  children), from this process's ``RUSAGE_CHILDREN`` around the run: exact, since every
  process has exited and been reaped (the supervisor reaps its children).
- the supervisor's own CPU seconds (``/proc``, last sample before it exited).
- ``auto_vs_separate``: the rate of ``--processes auto`` over that of the separate
  processes (>= 1.0: the supervisor costs nothing measurable).

Human-readable lines, then one JSON line (``bench.common.emit_json``).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.backlog import add_endpoint, emit_backlog
from bench.common import SCHEMA, emit_json, scratch_database
from bench.procs import Workers, children_cpu
from bench.sink import Sink

DONE_SQL = f"SELECT count(*) FILTER (WHERE state = 'delivered') FROM {SCHEMA}.deliveries"
_TICK = os.sysconf("SC_CLK_TCK")


def _prepare(url: str, sink_url: str, n: int) -> None:
    """One endpoint at the sink, ``n`` events (1,000 per transaction), statistics fresh:
    the same backlog as bench.deliver's throughput section."""
    add_endpoint(url, sink_url)
    emit_backlog(url, n)


def _own_cpu(pid: int) -> float | None:
    """CPU seconds of ``pid`` itself (not its children), or None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _drain(url: str, n: int, workers: Workers, supervisor: int | None,
           timeout: float) -> tuple[float, float]:
    """Wait until all ``n`` are delivered and the workers exited: (seconds to the last
    delivery, the supervisor's own CPU seconds or 0)."""
    start, deadline = time.perf_counter(), time.monotonic() + timeout
    own, elapsed = 0.0, None
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            running = workers.check()  # raises if one failed
            if supervisor is not None:
                own = _own_cpu(supervisor) or own
            if elapsed is None:
                row = conn.execute(DONE_SQL).fetchone()
                if row is not None and row[0] >= n:
                    elapsed = time.perf_counter() - start
            if not running:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not drained within {timeout:.0f} s")
            time.sleep(0.05)
    workers.wait(60)  # --drain: they exit by themselves (non-zero raises)
    if elapsed is None:
        raise RuntimeError("the workers exited before everything was delivered")
    return elapsed, own


def measure(n: int, concurrency: int, *, auto: bool, separate: int) -> dict[str, Any]:
    """Drain ``n`` deliveries with ``--processes auto`` or ``separate`` plain workers."""
    env = {"OUTBOX_CONCURRENCY": str(concurrency), "OUTBOX_LOG_FORMAT": "text",
           "OUTBOX_ENDPOINT_MAX_IN_FLIGHT": str(concurrency)}
    cmd = [sys.executable, "-m", "outbox", "worker", "--drain", "--processes", "auto"]
    with scratch_database() as url, Sink() as sink:
        _prepare(url, sink.url, n)
        before = children_cpu()
        with Workers(url, 1 if auto else separate, env, drain=True,
                     cmd=cmd if auto else None) as workers:
            top = next(iter(workers.pids())) if auto else None
            seconds, supervisor_cpu = _drain(url, n, workers, top, timeout=120 + n / 50)
            cpu = children_cpu() - before
            counters = workers.counters()
    if sink.report.distinct != n:
        raise RuntimeError(f"sink saw {sink.report.distinct} distinct ids, expected {n}")
    return {"mode": "processes auto" if auto else f"{separate} separate",
            "seconds": seconds, "deliveries_per_s": n / seconds,
            "worker_cpu_s": cpu, "worker_cpu_us_per_delivery": 1e6 * cpu / n,
            "supervisor_cpu_s": supervisor_cpu, "duplicates": sink.report.duplicates,
            "worker_counters": counters}


def run(events: int = 20_000, concurrency: int = 100, separate: int | None = None,
        repeat: int = 1) -> dict[str, Any]:
    """The section: ``--processes auto`` and ``separate`` processes (default: as many as
    ``auto`` runs), alternating."""
    from outbox.delivery.cpus import available_cpus

    separate = separate or available_cpus()
    runs: dict[str, list[dict[str, Any]]] = {"auto": [], "separate": []}
    for _ in range(repeat):
        for kind in ("auto", "separate"):
            res = measure(events, concurrency, auto=kind == "auto", separate=separate)
            runs[kind].append(res)
            _print(res, events)
    auto, sep = (statistics.median(r["deliveries_per_s"] for r in runs[k])
                 for k in ("auto", "separate"))
    auto_cpu, sep_cpu = (statistics.median(r["worker_cpu_us_per_delivery"] for r in runs[k])
                         for k in ("auto", "separate"))
    return {"events": events, "concurrency": concurrency, "cpus": available_cpus(),
            "separate": separate, "runs": runs, "auto_per_s": auto, "separate_per_s": sep,
            "auto_cpu_us_per_delivery": auto_cpu, "separate_cpu_us_per_delivery": sep_cpu,
            "auto_vs_separate": auto / sep}


def _print(r: dict[str, Any], n: int) -> None:
    print(f"drain {n:,} events, {r['mode']:<15} {r['deliveries_per_s']:>8,.0f} deliveries/s"
          f"  ({r['seconds']:.1f} s)  worker CPU {r['worker_cpu_us_per_delivery']:.0f}"
          f" us/delivery (supervisor {r['supervisor_cpu_s']:.2f} s of"
          f" {r['worker_cpu_s']:.1f} s)  duplicates {r['duplicates']}", flush=True)


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--separate", type=int, default=None,
                        help="plain worker processes (default: the CPUs 'auto' counts)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    # SIGTERM/SIGINT unwind through the finally blocks (workers, sink, scratch database)
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    res = run(args.events, args.concurrency, args.separate, args.repeat)
    print(f"--processes auto ({res['cpus']} CPUs) vs {res['separate']} separate processes:"
          f" {res['auto_vs_separate']:.2f}x the rate; worker CPU per delivery"
          f" {res['auto_cpu_us_per_delivery']:.0f} vs {res['separate_cpu_us_per_delivery']:.0f}"
          " us")
    emit_json("processes", res)


if __name__ == "__main__":
    main()
