"""Worker CPU per delivery against the bare loop's (``bench.bareloop``), in the same run.

    .venv/bin/python -m bench.cpu [--events 20000] [--processes 2] [--repeat 3]
        [--concurrency 100]

Each round drains the same backlog twice, each time on a fresh scratch database with one
endpoint and a fresh :class:`bench.sink.Sink` (durable commits: the server's
``synchronous_commit``): once with ``--processes`` ``outbox worker --drain`` processes
(``OUTBOX_CONCURRENCY`` and ``OUTBOX_ENDPOINT_MAX_IN_FLIGHT`` = ``--concurrency``), once
with as many ``python -m bench.bareloop`` processes (claims of ``--concurrency``). The
order alternates between rounds.

Figures per drain: deliveries/s (from the processes' start until the database shows every
delivery delivered) and CPU per delivery from the processes' own rusage
(:func:`bench.procs.children_cpu`, read after they exited): ``gross`` counts everything
the processes used, ``net`` subtracts their start-up and exit, measured as the CPU of the
same command draining an empty queue (``idle_cpu_s``, once per kind, up front). The
ratios (worker / bare loop) are taken within a round, then the median over the rounds is
reported: the machine's noise moves both sides of a round alike.

Human-readable lines, then one JSON line (``bench.common.emit_json``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench.backlog import add_endpoint, emit_backlog, wait_delivered
from bench.common import emit_json, scratch_database
from bench.procs import CpuMeter, Workers, children_cpu
from bench.sink import Sink

KINDS = ("worker", "bareloop")


def _command(kind: str, url: str, concurrency: int) -> list[str] | None:
    if kind == "worker":
        return None  # Workers' default: python -m outbox worker --drain
    return [sys.executable, "-m", "bench.bareloop", url, "--batch", str(concurrency)]


def _env(concurrency: int) -> dict[str, str]:
    return {"OUTBOX_CONCURRENCY": str(concurrency),
            "OUTBOX_ENDPOINT_MAX_IN_FLIGHT": str(concurrency)}


def drain(kind: str, n: int, k: int, concurrency: int) -> dict[str, Any]:
    """``k`` processes of ``kind`` drain a backlog of ``n`` (0: an empty queue) deliveries:
    seconds, deliveries/s, and the processes' CPU seconds (rusage, start-up included)."""
    with scratch_database() as url, Sink() as sink:
        add_endpoint(url, sink.url)
        emit_backlog(url, n)
        before = children_cpu()
        start = time.perf_counter()
        with Workers(url, k, _env(concurrency), drain=True,
                     cmd=_command(kind, url, concurrency)) as workers:
            if n:
                wait_delivered(url, n, workers, CpuMeter(), timeout=60 + n / 100)
            elapsed = time.perf_counter() - start
            workers.wait(60.0)
            cpu = children_cpu() - before
            counters = workers.counters()
    if n and sink.report.distinct != n:
        raise RuntimeError(f"{kind}: the sink saw {sink.report.distinct} ids, expected {n}")
    return {"kind": kind, "processes": k, "events": n, "seconds": round(elapsed, 3),
            "deliveries_per_s": round(n / elapsed, 1) if n else None,
            "cpu_s": round(cpu, 3), "duplicates": sink.report.duplicates,
            "counters": counters}


def per_delivery(run: dict[str, Any], idle_cpu_s: float) -> dict[str, float]:
    """Gross and net (minus ``processes`` x ``idle_cpu_s``) CPU microseconds per delivery."""
    n, cpu = run["events"], run["cpu_s"]
    return {"gross_us": round(1e6 * cpu / n, 1),
            "net_us": round(1e6 * max(cpu - run["processes"] * idle_cpu_s, 0.0) / n, 1)}


def measure(n: int, k: int, repeat: int, concurrency: int,
            out: Any = sys.stdout) -> dict[str, Any]:
    """The whole comparison (see the module docstring); a line per drain on ``out``."""
    idle = {kind: drain(kind, 0, 1, concurrency)["cpu_s"] for kind in KINDS}
    print(f"start-up + exit CPU of one process draining nothing: worker {idle['worker']:.2f}"
          f" s, bare loop {idle['bareloop']:.2f} s", file=out, flush=True)
    rounds: list[dict[str, Any]] = []
    for i in range(repeat):
        order = KINDS if i % 2 == 0 else KINDS[::-1]
        runs = {kind: drain(kind, n, k, concurrency) for kind in order}
        for kind in KINDS:
            runs[kind].update(per_delivery(runs[kind], idle[kind]))
            r = runs[kind]
            print(f"round {i + 1}: {k} x {kind:8s} {r['deliveries_per_s']:8,.0f} deliveries/s"
                  f"  CPU/delivery {r['net_us']:5.0f} us net, {r['gross_us']:5.0f} us gross"
                  f"  ({r['seconds']:.1f} s, {r['cpu_s']:.1f} CPU s,"
                  f" duplicates {r['duplicates']})", file=out, flush=True)
        w, b = runs["worker"], runs["bareloop"]
        rounds.append({**runs, "cpu_ratio_net": round(w["net_us"] / b["net_us"], 3),
                       "cpu_ratio_gross": round(w["gross_us"] / b["gross_us"], 3),
                       "rate_ratio": round(w["deliveries_per_s"] / b["deliveries_per_s"], 3)})

    def med(*path: str) -> float:
        values: list[float] = []
        for r in rounds:
            v: Any = r
            for key in path:
                v = v[key]
            values.append(float(v))
        return round(statistics.median(values), 3)

    summary = {
        "worker_deliveries_per_s": med("worker", "deliveries_per_s"),
        "bareloop_deliveries_per_s": med("bareloop", "deliveries_per_s"),
        "worker_cpu_us_per_delivery": med("worker", "net_us"),
        "bareloop_cpu_us_per_delivery": med("bareloop", "net_us"),
        "worker_cpu_us_per_delivery_gross": med("worker", "gross_us"),
        "bareloop_cpu_us_per_delivery_gross": med("bareloop", "gross_us"),
        "cpu_ratio": med("cpu_ratio_net"), "cpu_ratio_gross": med("cpu_ratio_gross"),
        "rate_ratio": med("rate_ratio"),
    }
    print(f"median of {repeat}: worker {summary['worker_cpu_us_per_delivery']:.0f} us vs bare"
          f" loop {summary['bareloop_cpu_us_per_delivery']:.0f} us CPU per delivery (net):"
          f" {summary['cpu_ratio']:.2f}x (gross {summary['cpu_ratio_gross']:.2f}x);"
          f" rate {summary['worker_deliveries_per_s']:,.0f}/s vs"
          f" {summary['bareloop_deliveries_per_s']:,.0f}/s ({summary['rate_ratio']:.2f}x)",
          file=out, flush=True)
    return {"events": n, "processes": k, "concurrency": concurrency, "repeat": repeat,
            "idle_cpu_s": idle, **summary, "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    emit_json("cpu", measure(args.events, args.processes, args.repeat, args.concurrency))


if __name__ == "__main__":
    main()
