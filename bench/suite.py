"""Every performance target in one run, beside its reference: ``python -m bench``.

    .venv/bin/python -m bench [--quick] [--only SECTION[,SECTION]] [--json PATH]

Runs these sections in order, each by calling the module that measures it (each on its
own scratch database on the local PostgreSQL, as ``python -m bench.<module>`` would):

- ``emit``: ``bench.emit.run`` -- an app transaction with and without ``emit``, and
  ``emit_many`` of 1,000 events.
- ``tenants``: ``bench.tenants.run`` -- ``emit`` with 200,000 endpoints over 100,000
  tenants vs one tenant's two endpoints; ``emit_many`` over 100 tenants.
- ``throughput``: ``bench.deliver.raw_reference`` (the worker's HTTP stack, no queue),
  then ``bench.deliver.throughput`` with 1 and 2 worker processes draining a backlog.
- ``latency``: ``bench.deliver.latency`` -- emit-commit to arrival at 500 events/s, one
  worker at the default poll interval.
- ``pgqueuer``, ``procrastinate`` (``peer`` selects both): the peer queues' no-op job
  drain rates (``bench.peer``, ``bench.peer_procrastinate``).
- ``history``: ``bench.history.run`` -- claim latency with delivered history vs empty.
- ``fairness``: ``bench.fairness.run`` -- nine healthy endpoints while a tenth hangs / 500s.
- ``neighbour``: ``bench.neighbour.run`` -- a quiet tenant's p99 during another's burst.
- ``memory``: ``bench.memory.measure`` -- worker RSS with 1,000 requests in flight.
- ``wakeup``: ``bench.wakeup.run`` -- lone-event latency and idle worker transactions/s,
  notify vs poll; 16 concurrent emitters with wake-ups on vs off.
- ``processes``: ``bench.processes.run`` -- ``outbox worker --processes auto`` vs as many
  separate workers on the same backlog: rates and CPU per delivery.
- ``web``: ``bench.web`` -- every API list and console page on a big history (1,000,000
  events, 50,000 dead deliveries in a full run): median answer time.
- ``ordering``: ``bench.ordering.run`` -- drain of 10,000 events over 1,000 keys to one
  ordered endpoint vs the same unordered, and one hot key's rate.
- ``cpu``: ``bench.cpu.measure`` -- 2 workers' CPU per delivery (their rusage) vs 2 bare
  loops' (``bench.bareloop``) on the same backlog, and the ratio.
- ``flow``: ``bench.flow.run`` -- one hot endpoint, 2 workers, default settings vs the
  per-endpoint cap lifted (claims per delivery, hand-backs); pgqueuer whose handler signs
  and POSTs; a 50/s limit under 4 workers beside an unlimited endpoint; a receiver that
  answers 429 above 100/s; 1,000 endpoints answering after 250 ms.

A section that raises is recorded as an error (its rows say so) and the next one runs.
Then one table (target | ours | reference | ratio | target value | met?) is printed, and
the whole run (sizes, each section's results, seconds and load average, errors, the
table) is written as JSON to ``--json`` (default ``bench/results/suite-<UTC time>.json``,
git-ignored) and printed as the last stdout line. Progress goes to stderr. Exit status 1
if a section failed; targets not met do not change it (benchmarks report, not assert).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import environment, scratch_database

Key = str | int
Results = dict[str, Any]


@dataclass(frozen=True)
class Sizes:
    """How much each section does (the modules' own defaults; QUICK for a smoke run)."""

    emit_rounds: int = 2000
    tenants: int = 100_000  # bench.tenants: two endpoints each
    events: int = 20_000  # throughput backlog
    concurrency: int = 100  # OUTBOX_CONCURRENCY of the workers, lanes of the raw reference
    rate: float = 500.0  # latency: events/s
    seconds: float = 10.0  # latency: emitting for
    peer_jobs: int = 20_000
    peer_repeat: int = 2
    history: int = 5_000_000
    history_rounds: int = 300
    fairness_events: int = 1500
    neighbour_events: int = 100_000  # the noisy tenant's burst
    neighbour_rate: float = 5.0  # the quiet tenant's events/s
    in_flight: int = 1000
    hold: float = 5.0


FULL = Sizes()
QUICK = replace(FULL, emit_rounds=500, tenants=10_000, events=5000, seconds=3.0, peer_jobs=5000,
                peer_repeat=1, history=500_000, history_rounds=100, fairness_events=500,
                neighbour_events=20_000, hold=3.0)


# -- sections: each returns its results dict (imports are local: a broken or missing
# -- benchmark dependency fails its own section only)

def run_emit(s: Sizes) -> Results:
    """bench.emit: median app transaction with / without emit; emit_many events/s."""
    from bench import emit
    with scratch_database() as url:
        return emit.run(url, s.emit_rounds)


def run_throughput(s: Sizes) -> Results:
    """bench.deliver: the raw HTTP stack's req/s, then 1 and 2 workers' deliveries/s."""
    from bench import deliver
    # one endpoint: its in-flight cap (a quarter of the concurrency by default, the
    # fairness knob that bench.fairness measures) is raised to the whole concurrency, so
    # this measures the pipeline, as a backlog spread over several endpoints would
    env = {"OUTBOX_CONCURRENCY": str(s.concurrency),
           "OUTBOX_ENDPOINT_MAX_IN_FLIGHT": str(s.concurrency)}
    res: Results = {"events": s.events, "concurrency": s.concurrency,
                    "raw": deliver.raw_reference(s.events, s.concurrency)}
    for k in (1, 2):
        res[f"workers_{k}"] = deliver.throughput(s.events, k, env)
    return res


def run_latency(s: Sizes) -> Results:
    """bench.deliver: emit-commit to arrival latency at a steady rate, default poll."""
    from bench import deliver
    return deliver.latency(s.rate, s.seconds, {"OUTBOX_CONCURRENCY": str(s.concurrency)},
                           None)


def run_pgqueuer(s: Sizes) -> Results:
    """bench.peer: pgqueuer's no-op drain at its default batch (10)."""
    from bench import peer
    return peer.pgqueuer_runs(s.peer_jobs, s.peer_repeat, (None,), out=sys.stderr)


def run_procrastinate(s: Sizes) -> Results:
    """bench.peer_procrastinate: procrastinate's no-op drain, concurrency 50."""
    from bench import peer_procrastinate
    return peer_procrastinate.runs(s.peer_jobs, s.peer_repeat, out=sys.stderr)


def run_tenants(s: Sizes) -> Results:
    """bench.tenants: emit median with 200,000 endpoints vs one tenant's; emit_many."""
    from bench import tenants
    with scratch_database() as url:
        return tenants.run(url, s.tenants, s.emit_rounds)


def run_history(s: Sizes) -> Results:
    """bench.history: claim median with delivered history vs an empty table."""
    from bench import history
    with scratch_database() as url:
        return history.run(url, s.history, s.history_rounds)


def run_fairness(s: Sizes) -> Results:
    """bench.fairness: nine healthy endpoints' deliveries/s, tenth healthy/hanging/500."""
    from bench import fairness
    return {name: fairness.run(s.fairness_events, path) for name, path in
            (("all healthy", "/ok9"), ("one hanging", "/hang"), ("one failing (500)", "/fail"))}


def run_neighbour(s: Sizes) -> Results:
    """bench.neighbour: the quiet tenant's p50/p99 during a burst; burst drain vs alone."""
    from bench import neighbour
    return neighbour.run(s.neighbour_events, s.neighbour_rate)


def run_wakeup(s: Sizes) -> Results:
    """bench.wakeup: lone-event latency, idle cost, 16 emitters with wake-ups on vs off."""
    from bench import wakeup
    return wakeup.run(quick=s is QUICK or s.seconds < FULL.seconds)


def run_cpu(s: Sizes) -> Results:
    """bench.cpu: 2 workers' CPU per delivery vs 2 bare loops' (bench.bareloop), same run."""
    from bench import cpu
    return cpu.measure(s.events, 2, 3 if s.events >= FULL.events else 1, s.concurrency,
                       out=sys.stderr)


def run_processes(s: Sizes) -> Results:
    """bench.processes: ``--processes auto`` vs separate workers, rate and CPU/delivery."""
    from bench import processes
    return processes.run(s.events, s.concurrency)


def run_web(s: Sizes) -> Results:
    """bench.web: median answer of every API list and console page on a big history."""
    from bench import web
    events, dead = (1_000_000, 50_000) if s.events >= FULL.events else (100_000, 5_000)
    with scratch_database() as url:
        took = web.setup(url, events, dead, dead)
        requests = web.measure(url, events, 15 if s is FULL else 5)
    slowest = max(r.get("median_ms", 0.0) for r in requests.values())
    failed = sorted(k for k, r in requests.items() if "median_ms" not in r)
    return {"events": events, "dead": dead, "shared_dead": dead, "setup_seconds": round(took, 1),
            "slowest_median_ms": slowest, "all_answered": not failed, "failed": failed,
            "requests": requests}


def run_ordering(s: Sizes) -> Results:
    """bench.ordering: ordered (1,000 keys) vs unordered drain rate; one hot key's rate."""
    from bench import ordering
    full = s.events >= FULL.events
    return ordering.run(events=10_000 if full else 3_000, keys=1_000 if full else 300,
                        repeat=2 if full else 1, out=sys.stderr)


def run_flow(s: Sizes) -> Results:
    """bench.flow: hot endpoint, pgqueuer signing+POST peer, 50/s limit, 429 receiver,
    slow endpoints, what limits cost an unlimited endpoint."""
    from bench import flow
    full = s.events >= FULL.events
    only = tuple(n for n in flow.SECTIONS if n != "peer_noop")  # the pgqueuer section's
    return flow.run(events=10_000 if full else 3_000, rounds=2 if full else 1,
                    seconds=20.0 if full else 8.0, only=only, out=sys.stderr)


def run_memory(s: Sizes) -> Results:
    """bench.memory: worker RSS, idle and with ``in_flight`` requests held open."""
    from bench import memory
    with scratch_database() as url:
        res: Results = dict(memory.measure(url, s.in_flight, s.hold))
    res["in_flight_target"] = s.in_flight
    res["all_in_flight"] = res["in_flight_reached"] >= s.in_flight
    return res


SECTIONS: dict[str, Callable[[Sizes], Results]] = {
    "emit": run_emit, "throughput": run_throughput, "latency": run_latency,
    "tenants": run_tenants, "pgqueuer": run_pgqueuer, "procrastinate": run_procrastinate,
    "history": run_history,
    "fairness": run_fairness, "neighbour": run_neighbour, "memory": run_memory,
    "wakeup": run_wakeup, "cpu": run_cpu, "processes": run_processes, "web": run_web,
    "ordering": run_ordering, "flow": run_flow,
}
GROUPS = {"peer": ("pgqueuer", "procrastinate"), "deliver": ("throughput", "latency")}


# -- targets and verdicts (pure functions of the results)

@dataclass(frozen=True)
class Target:
    """One row: ``ours`` (or ours / reference, when there is a reference) against limit."""

    label: str
    ours: tuple[Key, ...]  # path into the results; the first key is the section
    op: str  # ">=", "<=" or "<"; "" for a row shown for information, with no target
    limit: float
    unit: str
    digits: int = 0
    reference: tuple[Key, ...] | None = None
    requires: tuple[Key, ...] | None = None  # a path that must be true for a "yes"


W2 = ("throughput", "workers_2", "deliveries_per_s")
TARGETS = (
    Target("(info) throughput, 1 worker vs raw HTTP stack", ("throughput", "workers_1",
           "deliveries_per_s"), "", 0, "/s", reference=("throughput", "raw", "stack_per_s")),
    Target("throughput, 2 workers vs raw HTTP stack", W2, ">=", 0.6, "/s",
           reference=("throughput", "raw", "stack_per_s")),
    Target("throughput, 2 workers vs pgqueuer no-op drain (batch 10)", W2, ">=", 1.0, "/s",
           reference=("pgqueuer", "median_rate_by_batch", "10")),
    Target("throughput, 2 workers vs procrastinate no-op drain (conc. 50)", W2, ">=", 1.0,
           "/s", reference=("procrastinate", "median_rate")),
    Target("emit overhead, median app transaction", ("emit", "emit_tx_ms", "p50"), "<=", 1.3,
           "ms", 3, reference=("emit", "plain_tx_ms", "p50")),
    Target("reference: app transaction + a bare second INSERT", ("emit",
           "second_insert_tx_ms", "p50"), "<=", 1.3, "ms", 3,
           reference=("emit", "plain_tx_ms", "p50")),
    Target("emit_many, 1,000 events", ("emit", "emit_many_1000_events_per_s"), ">=", 50_000,
           "events/s"),
    Target("emit, 100,000 tenants x 2 endpoints (quick: 10,000) vs one tenant's 2",
           ("tenants", "many_endpoints_tx_ms", "p50"), "<=", 1.1, "ms", 3,
           reference=("tenants", "few_endpoints_tx_ms", "p50")),
    Target("emit_many, 1,000 events over 100 tenants (2 endpoints each)",
           ("tenants", "emit_many_100_tenants_events_per_s"), ">=", 50_000, "events/s"),
    Target("latency p50 at 500 events/s", ("latency", "latency_ms", "p50"), "<=", 20, "ms", 1),
    Target("latency p99 at 500 events/s", ("latency", "latency_ms", "p99"), "<=", 100, "ms", 1),
    Target("claim median, delivered history vs empty", ("history", "history_ms", "p50"), "<=",
           1.2, "ms", 2, reference=("history", "empty_ms", "p50")),
    Target("fairness, tenth endpoint hanging", ("fairness", "one hanging"), ">=", 0.9, "/s",
           reference=("fairness", "all healthy")),
    Target("fairness, tenth endpoint answering 500", ("fairness", "one failing (500)"), ">=",
           0.9, "/s", reference=("fairness", "all healthy")),
    Target("noisy neighbour: quiet tenant p99 during a burst",
           ("neighbour", "quiet_latency_ms", "p99"), "<=", 2000, "ms", 1),
    Target("noisy neighbour: burst drain rate vs the burst alone",
           ("neighbour", "with_quiet", "deliveries_per_s"), ">=", 0.9, "/s",
           reference=("neighbour", "alone", "deliveries_per_s")),
    Target("lone event, emit-commit to receipt p50 (OUTBOX_WAKEUP=notify)",
           ("wakeup", "latency", "notify", "latency_ms", "p50"), "<=", 5, "ms", 1),
    Target("lone event, emit-commit to receipt p90 (OUTBOX_WAKEUP=notify)",
           ("wakeup", "latency", "notify", "latency_ms", "p90"), "<=", 10, "ms", 1),
    Target("idle worker, transactions/s (OUTBOX_WAKEUP=notify)",
           ("wakeup", "idle_tx_per_s", "notify"), "<=", 1.0, "/s", 2),
    Target("16 emitters, 1 event/tx, wake-up on (workers busy) vs off",
           ("wakeup", "emit_16", "batch_1", "tx_per_s", "sentinel, workers busy"), ">=", 0.9,
           "tx/s", reference=("wakeup", "emit_16", "batch_1", "tx_per_s", "off")),
    Target("16 emitters, 100-event emit_many/tx, wake-up on (workers busy) vs off",
           ("wakeup", "emit_16", "batch_100", "tx_per_s", "sentinel, workers busy"), ">=",
           0.9, "tx/s", reference=("wakeup", "emit_16", "batch_100", "tx_per_s", "off")),
    Target("(info) 16 emitters, 1 event/tx, NOTIFY in every tx vs off",
           ("wakeup", "emit_16", "batch_1", "tx_per_s", "notify every transaction"), "", 0,
           "tx/s", reference=("wakeup", "emit_16", "batch_1", "tx_per_s", "off")),
    Target("worker CPU per delivery vs bare loop, 2 processes (net of start-up)",
           ("cpu", "worker_cpu_us_per_delivery"), "<=", 1.5, "us",
           reference=("cpu", "bareloop_cpu_us_per_delivery")),
    Target("(info) worker CPU per delivery vs bare loop, start-up included",
           ("cpu", "worker_cpu_us_per_delivery_gross"), "", 0, "us",
           reference=("cpu", "bareloop_cpu_us_per_delivery_gross")),
    Target("ordered endpoint, 1,000 keys vs unordered, drain rate",
           ("ordering", "ordered_per_second"), ">=", 0.8, "/s",
           reference=("ordering", "unordered_per_second")),
    Target("(info) ordered endpoint, one hot key", ("ordering", "hot_key_per_second"), "", 0,
           "/s"),
    Target("--processes auto vs separate workers, deliveries/s",
           ("processes", "auto_per_s"), ">=", 0.9, "/s",
           reference=("processes", "separate_per_s")),
    Target("(info) --processes auto vs separate workers, CPU per delivery",
           ("processes", "auto_cpu_us_per_delivery"), "", 0, "us",
           reference=("processes", "separate_cpu_us_per_delivery")),
    Target("web: slowest API list / console page, median", ("web", "slowest_median_ms"),
           "<", 200, "ms", requires=("web", "all_answered")),
    Target("worker RSS, 1,000 requests in flight", ("memory", "peak_rss_mb"), "<", 200, "MB",
           requires=("memory", "all_in_flight")),
    Target("hot endpoint, 2 workers, default settings vs cap lifted",
           ("flow", "hot", "default", "deliveries_per_s"), ">=", 0.9, "/s",
           reference=("flow", "hot", "cap_lifted", "deliveries_per_s")),
    Target("hot endpoint, claims per delivery (default settings)",
           ("flow", "hot", "default", "claims_per_delivery"), "<=", 1.02, "", 3),
    # like with like: the sink's first-to-last arrival rate on both sides; the clocks that
    # include our two interpreter start-ups (and not the peer's) as (info) rows
    Target("hot endpoint, 2 workers vs pgqueuer signing + POST handler (arrivals/s)",
           ("flow", "hot", "default", "arrivals_per_s"), ">=", 1.5, "/s",
           reference=("flow", "peer_post", "median_arrivals_per_s")),
    Target("(info) the same, ours from process start vs the peer's from its run loop",
           ("flow", "hot", "default", "deliveries_per_s"), "", 0, "/s",
           reference=("flow", "peer_post", "median_rate")),
    Target("hot endpoint, 2 workers (arrivals/s) vs pgqueuer no-op drain (run loop)",
           ("flow", "hot", "default", "arrivals_per_s"), ">=", 1.0, "/s",
           reference=("pgqueuer", "median_rate_by_batch", "10")),
    Target("(info) the same, ours from process start",
           ("flow", "hot", "default", "deliveries_per_s"), "", 0, "/s",
           reference=("pgqueuer", "median_rate_by_batch", "10")),
    Target("50/s limit, 4 workers: rate at the receiver", ("flow", "limit50",
           "limited_per_s"), ">=", 45, "/s", 1),
    Target("50/s limit, 4 workers: most requests in one second",
           ("flow", "limit50", "limited_max_in_one_second"), "<=", 100, ""),
    # judged by the median of the interleaved pairs' ratios: the rate alone moves by +-15%
    # from one run to the next on two shared cores, so the ratio of each side's median
    # compares runs of different minutes (2026-11-26: pairs 1.05, 0.84, 0.95; medians 0.84)
    Target("50/s limit beside: unlimited endpoint vs alone, median of paired ratios",
           ("flow", "limit50", "unlimited_ratio_median_of_pairs"), ">=", 0.9, "", 2),
    Target("limits beside: unlimited endpoint's worker CPU per delivery vs alone",
           ("flow", "limitcost", "beside_limited", "worker_cpu_us_per_delivery"), "<=", 1.05,
           "us", reference=("flow", "limitcost", "alone", "worker_cpu_us_per_delivery")),
    Target("429 above 100/s: 429 share after 10 s", ("flow", "gateway",
           "after_10s_429_share"), "<", 0.1, "", 3),
    Target("429 above 100/s: delivered/s after 10 s", ("flow", "gateway",
           "after_10s_delivered_per_s"), ">=", 70, "/s", 1),
    Target("1,000 endpoints at 250 ms, per process, default settings, minimal receiver",
           ("flow", "slow", "default", "deliveries_per_s_per_process"), ">=", 1500, "/s",
           requires=("flow", "slow", "default", "complete")),
    Target("(info) 1,000 endpoints at 250 ms, per process, concurrency 100",
           ("flow", "slow", "100", "deliveries_per_s_per_process"), "", 0, "/s"),
    Target("(info) 1,000 endpoints at 250 ms, per process, with the aiohttp sink",
           ("flow", "slow", "aiohttp_sink", "deliveries_per_s_per_process"), "", 0, "/s"),
)


@dataclass(frozen=True)
class Row:
    """A rendered table row; ``met`` is None when there is nothing to judge."""

    target: str
    ours: str
    reference: str
    ratio: str
    target_value: str
    verdict: str
    met: bool | None


def lookup(results: Results, path: Sequence[Key]) -> Any:
    """The value at ``path`` in nested dicts/lists, or None where any step is missing."""
    node: Any = results
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def compare(value: float, op: str, limit: float) -> bool:
    """``value op limit`` for op in ">=", "<=", "<"."""
    if op == ">=":
        return value >= limit
    if op == "<=":
        return value <= limit
    if op == "<":
        return value < limit
    raise ValueError(f"unknown comparison {op!r}")


def _number(value: float | None, unit: str, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f} {unit}"


def _missing(t: Target, results: Results, errors: dict[str, str]) -> str | None:
    """Why a row cannot be judged (a section failed or did not run), else None."""
    for path in (t.ours, t.reference):
        if path is None:
            continue
        section = str(path[0])
        if section in errors:
            return f"error in {section}: {errors[section]}"
        if section not in results:
            return f"not run ({section})"
        if not isinstance(lookup(results, path), int | float):
            return f"no figure at {'.'.join(map(str, path))}"
    return None


def row(t: Target, results: Results, errors: dict[str, str]) -> Row:
    """Judge one target against the sections' results (and their errors)."""
    ours, ref = lookup(results, t.ours), t.reference and lookup(results, t.reference)
    ours_s = _number(ours if isinstance(ours, int | float) else None, t.unit, t.digits)
    ref_s = _number(ref if isinstance(ref, int | float) else None, t.unit, t.digits)
    limit = f"{t.op} {t.limit:g}x" if t.reference else f"{t.op} {t.limit:,g} {t.unit}"
    if not t.op:
        limit = "-"
    why = _missing(t, results, errors)
    if why is not None:
        return Row(t.label, ours_s, ref_s, "-", limit, why, None)
    value = ours / ref if t.reference else ours
    if t.reference and not ref:
        return Row(t.label, ours_s, ref_s, "-", limit, "reference is zero", None)
    if not t.op:
        return Row(t.label, ours_s, ref_s, f"{value:.2f}x" if t.reference else "-", limit,
                   "-", None)
    met = compare(value, t.op, t.limit)
    verdict = "yes" if met else "no"
    if met and t.requires is not None and not lookup(results, t.requires):
        met, verdict = False, f"no ({t.requires[-1]} is false)"
    return Row(t.label, ours_s, ref_s, f"{value:.2f}x" if t.reference else "-", limit,
               verdict, met)


def rows_for(names: Sequence[str], results: Results, errors: dict[str, str]) -> list[Row]:
    """The rows of the targets whose figure or reference comes from a section in names."""
    return [row(t, results, errors) for t in TARGETS
            if {str(t.ours[0]), str((t.reference or t.ours)[0])} & set(names)]


def table(rows: Sequence[Row], width: int = 70) -> str:
    """The rows as a Markdown table (verdicts cut to ``width`` characters)."""
    head = ("target", "ours", "reference", "ratio", "target value", "met?")
    cells = [head] + [(r.target, r.ours, r.reference, r.ratio, r.target_value,
                       r.verdict if len(r.verdict) <= width else r.verdict[:width - 3] + "...")
                      for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)) + " |"
             for cs in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


# -- running

def select(only: str | None) -> list[str]:
    """Section names in run order for ``--only`` (names or groups, comma-separated)."""
    if not only:
        return list(SECTIONS)
    wanted: set[str] = set()
    for name in filter(None, (n.strip() for n in only.split(","))):
        if name in GROUPS:
            wanted.update(GROUPS[name])
        elif name in SECTIONS:
            wanted.add(name)
        else:
            choices = ", ".join([*SECTIONS, *GROUPS])
            raise ValueError(f"unknown section {name!r} (choose from {choices})")
    return [name for name in SECTIONS if name in wanted]


def run_sections(names: Sequence[str], sizes: Sizes
                 ) -> tuple[Results, dict[str, str], dict[str, Any]]:
    """Run each section, recording its results, or its error, its wall seconds and the
    machine's 1-minute load average after it (above ~1 on these 2 cores: other work ran).

    An interrupt (Ctrl-C, SIGTERM) stops the run after the interrupted section's
    cleanup; it is recorded as that section's error and the rest are skipped."""
    results: Results = {}
    errors: dict[str, str] = {}
    timing: dict[str, Any] = {}
    for name in names:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            results[name] = SECTIONS[name](sizes)
        except KeyboardInterrupt:
            errors[name] = "interrupted"
            break
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            errors[name] = f"{type(exc).__name__}: {exc}"
        finally:
            timing[name] = {"seconds": round(time.perf_counter() - start, 1),
                            "load_after": round(os.getloadavg()[0], 2)}
            print(f"[bench] {name}: {errors.get(name, 'done')} ({timing[name]['seconds']} s,"
                  f" load {timing[name]['load_after']})", file=sys.stderr, flush=True)
    return results, errors, timing


def default_json_path() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path(__file__).resolve().parent / "results" / f"suite-{stamp}.json"


def write_report(report: Results, path: Path) -> None:
    """The report as indented JSON at ``path`` and as one JSON line on stdout (last)."""
    payload = {"bench": "suite", "environment": environment(), "results": report}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"[bench] JSON written to {path}", file=sys.stderr, flush=True)
    sys.stdout.write(json.dumps(payload, default=str) + "\n")


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Every performance target in one run, beside"
        " its reference; a table, then JSON. See bench/README.md.")
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes for a smoke run (figures not comparable)")
    parser.add_argument("--only", metavar="NAME[,NAME]",
                        help=f"sections: {', '.join(SECTIONS)}; groups: "
                             + ", ".join(f"{g} ({'+'.join(m)})" for g, m in GROUPS.items()))
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="where to write the JSON (default bench/results/suite-<time>.json)")
    args = parser.parse_args(argv)
    try:
        names = select(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    # SIGTERM unwinds like Ctrl-C: through the sections' cleanup (workers, scratch DBs).
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    sizes = QUICK if args.quick else FULL
    results, errors, timing = run_sections(names, sizes)
    rows = rows_for(names, results, errors)
    print(table(rows), flush=True)
    report = {"quick": args.quick, "selected": names, "sizes": asdict(sizes),
              "timing": timing, "errors": errors, "table": [asdict(r) for r in rows],
              "sections": results}
    write_report(report, args.json or default_json_path())
    return 1 if errors else 0
