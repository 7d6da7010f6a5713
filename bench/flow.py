"""Flow control: a hot endpoint at full speed, rate limits across processes, throttling.

    .venv/bin/python -m bench.flow [--events 10000] [--rounds 2] [--seconds 20]
        [--only hot,peer_post,peer_noop,limit50,gateway,slow,limitcost]

Sections (each on fresh scratch databases, worker processes ``python -m outbox worker``):

- ``hot``: one endpoint (``bench.sink``), ``--events`` backlog, two ``--drain`` workers at
  default settings vs the same with the per-endpoint cap lifted to the concurrency
  (``OUTBOX_ENDPOINT_MAX_IN_FLIGHT``): deliveries/s (median of ``--rounds``; the clock runs
  from the workers' start, interpreter start-up and imports included, to the database
  showing all delivered), arrivals/s (the sink's first to last arrival), claims per
  delivery, rows per claim and per completion flush, and hand-backs (from the workers'
  exit counters).
- ``peer_post``: pgqueuer draining the same number of jobs with a handler that signs and
  POSTs each one to the same kind of sink (``bench.peer_post``: its clock runs from
  ``QueueManager.run``, imported and connected, to the last answer), and the same sink's
  first-to-last arrival rate; ``peer_noop``: its no-op drain (``bench.peer``), the floor.
  Compare like with like: arrivals/s with arrivals/s (the same sink, the same clock on
  both sides), deliveries/s with ``median_rate`` (ours pays two interpreter start-ups,
  about 0.6 s of CPU each, in a 2.3-2.7 s drain, that the peer's clock leaves out).
- ``limit50``: four workers; one endpoint limited to 50/s (``bench.limited`` receiver) and
  one unlimited (``bench.sink``) in the same run for ``--seconds``: the limited one's
  rate at the receiver and most requests in any one second; the unlimited one's rate vs
  its rate alone (same workers, same backlog, no limited endpoint); ``--rounds`` pairs
  (at least two), alternating, medians.
- ``gateway``: two workers, default settings, 3,000 events to a receiver that answers 429
  with ``Retry-After: 1`` whenever it got more than 100 requests in the last second: the
  429 share and deliveries/s after the first 10 s.
- ``slow``: 1,000 endpoints answering after 250 ms, 50,000 deliveries, two workers:
  deliveries/s per process (from the workers' start to the last delivery recorded), peak
  RSS per process, worker CPU per delivery, at default settings (concurrency 1000;
  median of ``--rounds``), then at ``OUTBOX_CONCURRENCY`` 100 (the old default) and 500.
  The receiver is the minimal one (``bench.rawsink``, ~40 us of CPU per request); one
  more run at the defaults uses the aiohttp sink (~200 us a request), which on these two
  cores takes CPU from the workers and the database. Not comparable with figures before
  2026-11-26 20:30 UTC: those used the aiohttp sink (about half a core more here) and
  ended at the 0.5 s poll that saw every delivery made.
- ``limitcost``: what rate limits cost an unlimited endpoint: two workers drain
  ``--events`` to an unlimited endpoint (``bench.sink``) alone, and beside an endpoint
  limited to 50/s with a backlog of its own (every claim budgets it: its flow row locked,
  tokens taken); worker CPU per delivery (rusage, start-up to exit, over every delivery
  made, the limited one's included) and the unlimited one's deliveries/s, median of
  ``--rounds``, the two alternating (each pair in the other order than the last).

Human-readable lines, then one JSON line. The machine is shared: report medians, compare
only figures of the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterable
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from bench.deliver import throughput
from bench.limited import LimitedReceiver
from bench.procs import Workers, children_cpu
from bench.sink import Sink
from outbox.admin import endpoints as ep

Results = dict[str, Any]


def _median_of(values: Iterable[float | None]) -> float | None:
    """The median of the figures a run produced (None: no run did)."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def hot(events: int, rounds: int, concurrency: int = 1000) -> Results:
    """Two drain workers on one endpoint: default settings vs the cap lifted to the
    default concurrency (1000)."""
    runs: dict[str, list[Results]] = {"default": [], "cap_lifted": []}
    for _ in range(rounds):
        runs["default"].append(throughput(events, 2, {}))
        runs["cap_lifted"].append(throughput(
            events, 2, {"OUTBOX_ENDPOINT_MAX_IN_FLIGHT": str(concurrency)}))
    out: Results = {"events": events, "rounds": rounds}
    for name, rs in runs.items():
        counters = [r["worker_counters"] for r in rs]
        out[name] = {
            "deliveries_per_s": statistics.median(r["deliveries_per_s"] for r in rs),
            "arrivals_per_s": _median_of(r["sink_span_per_s"] for r in rs),
            "claims_per_delivery": max(c.get("claimed", 0) / max(c.get("delivered", 1), 1)
                                       for c in counters),
            "rows_per_claim": statistics.median(
                c.get("claimed", 0) / max(c.get("claims", 1), 1) for c in counters),
            "rows_per_flush": statistics.median(
                c.get("claimed", 0) / max(c.get("flushes", 1), 1) for c in counters),
            "handbacks": sum(c.get("handbacks", 0) for c in counters),
            "worker_cpu_us_per_delivery": statistics.median(
                r["worker_cpu_us_per_delivery"] for r in rs),
            "runs": [round(r["deliveries_per_s"]) for r in rs]}
    out["ratio"] = out["default"]["deliveries_per_s"] / out["cap_lifted"]["deliveries_per_s"]
    return out


def peer_post(events: int, rounds: int) -> Results:
    from bench import peer_post as pp
    runs = [pp.one_run(events) for _ in range(rounds)]
    return {"jobs": events, "median_rate": statistics.median(r["rate"] for r in runs),
            "median_arrivals_per_s": _median_of(r["arrivals_per_s"] for r in runs),
            "runs": runs}


def _add(url: str, target: str, event_type: str, **kwargs: Any) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        ep.add(c, target, schema=SCHEMA, event_types=[event_type], **kwargs)


def _emit(url: str, n: int, event_type: str) -> None:
    with psycopg.connect(url) as c:
        for start in range(0, n, 1000):
            outbox.emit_many(c, [outbox.Event(event_type, {"n": i})
                                 for i in range(start, min(n, start + 1000))], schema=SCHEMA)
        c.commit()


def _max_in_any_second(times: list[float]) -> int:
    times, best, j = sorted(times), 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def _unlimited_rate(seconds: float, with_limited: bool, workers: int = 4) -> Results:
    """Deliveries/s to an unlimited endpoint over ``seconds`` (from 3 s after the first
    deliveries), with or without a 50/s-limited endpoint served by the same workers."""
    with scratch_database() as url, Sink() as sink, LimitedReceiver() as rx:
        _add(url, sink.url + "/free", "free.event")
        _emit(url, 100_000, "free.event")
        if with_limited:
            _add(url, rx.url + "/limited", "limited.event", rate_limit=50)
            _emit(url, int(50 * (seconds + 10) * 1.5), "limited.event")
        with Workers(url, workers, {}, drain=False) as procs, \
                psycopg.connect(url, autocommit=True) as c:
            def delivered() -> int:
                row = c.execute(f"SELECT count(*) FROM {SCHEMA}.deliveries d JOIN"
                                f" {SCHEMA}.endpoints e ON e.id = d.endpoint_id WHERE"
                                " d.state = 'delivered' AND e.url LIKE '%%/free'").fetchone()
                return int(row[0]) if row else 0
            up = time.monotonic()  # every worker up (start-up is seconds on a busy host)
            while (delivered() == 0 or (with_limited and not rx.hits)) \
                    and time.monotonic() - up < 60:
                time.sleep(0.1)
            time.sleep(3.0)
            before, t0 = delivered(), time.monotonic()
            time.sleep(seconds)
            after, t1 = delivered(), time.monotonic()
            procs.wait(terminate=True)
        times = [h.at for h in rx.hits if t0 <= h.at <= t1]
    res: Results = {"unlimited_per_s": (after - before) / (t1 - t0)}
    if with_limited:
        res.update({"limited_per_s": len(times) / (t1 - t0),
                    "limited_max_in_one_second": _max_in_any_second(times),
                    "limited_429s": sum(h.status != 200 for h in rx.hits)})
    return res


def limit50(seconds: float, rounds: int) -> Results:
    """``rounds`` pairs of runs, the unlimited endpoint beside the limited one and alone,
    each pair in the other order than the one before, so that a slow minute of the machine
    falls on both sides (four workers on two cores: one run's rate moves by +-20%). The
    unlimited rates are the medians of each side, the ratio also per pair; the limited
    rate is over every run beside it (``rounds`` x ``seconds``), its most requests in one
    second the most of any run."""
    beside: list[Results] = []
    alone: list[Results] = []
    for i in range(rounds):
        for with_limited in ((True, False) if i % 2 == 0 else (False, True)):
            (beside if with_limited else alone).append(_unlimited_rate(seconds, with_limited))
    pairs = [b["unlimited_per_s"] / a["unlimited_per_s"]
             for b, a in zip(beside, alone, strict=True)]
    return {"unlimited_per_s": statistics.median(b["unlimited_per_s"] for b in beside),
            "unlimited_alone_per_s": statistics.median(a["unlimited_per_s"] for a in alone),
            "unlimited_ratio_median_of_pairs": statistics.median(pairs),
            "pairs": [[round(b["unlimited_per_s"]), round(a["unlimited_per_s"])]
                      for b, a in zip(beside, alone, strict=True)],
            "limited_per_s": statistics.fmean(b["limited_per_s"] for b in beside),
            "limited_max_in_one_second": max(b["limited_max_in_one_second"] for b in beside),
            "limited_429s": sum(b["limited_429s"] for b in beside),
            "seconds": seconds, "rounds": rounds}


def gateway(events: int = 6000, seconds: float = 40.0) -> Results:
    """Two workers at default settings against a 429-above-100/s receiver, for
    ``seconds`` with a backlog left at the end (a 429'd delivery's own retry follows the
    retry schedule, up to a minute: a drain's tail would measure that, not the rate)."""
    with scratch_database() as url, LimitedReceiver(limit=100, retry_after="1") as rx:
        _add(url, rx.url + "/gateway", "gw.event")
        _emit(url, events, "gw.event")
        with Workers(url, 2, {}, drain=False) as procs:
            start = time.monotonic()
            time.sleep(seconds)
            procs.wait(terminate=True)
            counters = procs.counters()
        hits = [h for h in rx.hits if start + 10 <= h.at < start + seconds]
    ok = [h for h in hits if h.status == 200]
    return {"events": events, "seconds": seconds,
            "after_10s_429_share": sum(h.status == 429 for h in hits) / max(len(hits), 1),
            "after_10s_delivered_per_s": len(ok) / (seconds - 10),
            "first_10s_429s": sum(h.status == 429 for h in rx.hits if h.at < start + 10),
            "per_second": [[sum(h.status == 200 for h in rx.hits if t <= h.at - start < t + 1),
                            sum(h.status == 429 for h in rx.hits if t <= h.at - start < t + 1)]
                           for t in range(int(seconds))],
            "worker_counters": counters}


def _peak_rss_mb(pids: set[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        out[pid] = int(line.split()[1]) / 1024
        except OSError:
            pass
    return out


def _slow_run(endpoints: int, events: int, conc: int, server: str) -> Results:
    """One drain of ``events`` spread over ``endpoints`` endpoints answering after 250 ms,
    two workers at ``OUTBOX_CONCURRENCY=conc``, the sink's ``server``."""
    with scratch_database() as url, Sink(server=server) as sink:
        with psycopg.connect(url, autocommit=True) as c:
            for i in range(endpoints):
                ep.add(c, f"{sink.url}/slow{i}", schema=SCHEMA)
        per = max(events // endpoints, 1)
        _emit(url, per, "slow.event")  # every endpoint gets every event
        total = per * endpoints
        cpu = children_cpu()
        count = (f"SELECT count(*), extract(epoch FROM max(finished_at))::float8"
                 f" FROM {SCHEMA}.deliveries WHERE state = 'delivered'")
        with psycopg.connect(url, autocommit=True) as c:
            start_wall, start, peak = time.time(), time.monotonic(), {}
            with Workers(url, 2, {"OUTBOX_CONCURRENCY": str(conc)}, drain=True) as procs:
                delivered = 0
                while delivered < total and time.monotonic() - start < 300:
                    time.sleep(0.5)
                    delivered = (c.execute(count).fetchone() or (0,))[0]
                    peak.update(_peak_rss_mb(procs.pids()))
                # --drain: they exit by themselves once all is delivered; stopped if not
                procs.wait(timeout=60, terminate=delivered < total)
            # from the workers' start to the last delivery recorded (not to the poll);
            # the database is local: its now() and time.time() read the same clock
            delivered, last = c.execute(count).fetchone() or (0, None)
        cpu = children_cpu() - cpu
        elapsed = (last or time.time()) - start_wall
    rep = sink.report
    return {"deliveries_per_s_per_process": delivered / elapsed / 2,
            "complete": delivered == total, "seconds": round(elapsed, 1),
            "peak_rss_mb": max(peak.values(), default=0.0),
            "worker_cpu_us_per_delivery": cpu / max(delivered, 1) * 1e6,
            "receiver_cpu_us_per_request": rep.cpu_seconds / max(rep.requests, 1) * 1e6,
            "received": rep.requests}


def slow(endpoints: int, events: int, rounds: int,
         concurrencies: tuple[int, ...] = (100, 500)) -> Results:
    """``endpoints`` endpoints answering after 250 ms, two workers: at default settings
    (concurrency 1000), ``rounds`` runs (the median) with the minimal receiver
    (bench.rawsink), then one at each of ``concurrencies``, and last one with the aiohttp
    sink (five times the receiver's CPU per request, on the same two cores; one run, not a
    paired comparison)."""
    runs = [_slow_run(endpoints, events, 1000, "raw") for _ in range(max(rounds, 1))]
    res: Results = {"endpoints": endpoints, "events": events,
                    "default": {"complete": all(r["complete"] for r in runs),
                                "deliveries_per_s_per_process": statistics.median(
                                    r["deliveries_per_s_per_process"] for r in runs),
                                "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                                "worker_cpu_us_per_delivery": statistics.median(
                                    r["worker_cpu_us_per_delivery"] for r in runs),
                                "runs": runs}}
    for conc in concurrencies:
        res[str(conc)] = _slow_run(endpoints, events, conc, "raw")
    res["aiohttp_sink"] = _slow_run(endpoints, events, 1000, "aiohttp")
    return res


def _cost_run(events: int, with_limited: bool) -> Results:
    """Two workers until ``events`` deliveries to an unlimited endpoint are made, with or
    without a 50/s-limited endpoint's backlog beside it; their CPU per delivery."""
    with scratch_database() as url, Sink() as sink, LimitedReceiver() as rx:
        _add(url, sink.url + "/free", "free.event")
        _emit(url, events, "free.event")
        if with_limited:
            _add(url, rx.url + "/limited", "limited.event", rate_limit=50)
            _emit(url, 20_000, "limited.event")
        count = (f"SELECT count(*) FILTER (WHERE e.url LIKE '%%/free'), count(*)"
                 f" FROM {SCHEMA}.deliveries d JOIN {SCHEMA}.endpoints e"
                 " ON e.id = d.endpoint_id WHERE d.state = 'delivered'")
        reaped, start = children_cpu(), time.monotonic()
        with Workers(url, 2, {}, drain=False) as procs, \
                psycopg.connect(url, autocommit=True) as c:
            free = total = 0
            while free < events and time.monotonic() - start < 300:
                time.sleep(0.1)
                row = c.execute(count).fetchone()
                free, total = (int(row[0]), int(row[1])) if row else (0, 0)
            elapsed = time.monotonic() - start
            procs.wait(terminate=True)
            row = c.execute(count).fetchone()
            total = int(row[1]) if row else total
        cpu = children_cpu() - reaped
    return {"free_per_s": free / elapsed, "deliveries": total,
            "worker_cpu_us_per_delivery": 1e6 * cpu / max(total, 1)}


def limit_cost(events: int, rounds: int) -> Results:
    """CPU per delivery of an unlimited endpoint's drain, alone vs beside a limited one."""
    runs: dict[str, list[Results]] = {"alone": [], "beside_limited": []}
    for i in range(rounds):  # alternating, each pair in the other order than the last
        for with_limited in ((False, True) if i % 2 == 0 else (True, False)):
            runs["beside_limited" if with_limited else "alone"].append(
                _cost_run(events, with_limited))
    out: Results = {"events": events, "rounds": rounds}
    for name, rs in runs.items():
        out[name] = {key: statistics.median(r[key] for r in rs)
                     for key in ("free_per_s", "worker_cpu_us_per_delivery")}
        out[name]["runs"] = [(round(r["worker_cpu_us_per_delivery"]), round(r["free_per_s"]))
                             for r in rs]
    out["cpu_ratio"] = (out["beside_limited"]["worker_cpu_us_per_delivery"]
                        / out["alone"]["worker_cpu_us_per_delivery"])
    out["cpu_ratio_median_of_pairs"] = statistics.median(
        b["worker_cpu_us_per_delivery"] / a["worker_cpu_us_per_delivery"]
        for a, b in zip(runs["alone"], runs["beside_limited"], strict=True))
    return out


SECTIONS = ("hot", "peer_post", "peer_noop", "limit50", "gateway", "slow", "limitcost")


def run(events: int = 10_000, rounds: int = 2, seconds: float = 20.0,
        only: tuple[str, ...] = SECTIONS, out: Any = sys.stderr) -> Results:
    res: Results = {}
    for name in only:
        print(f"[bench.flow] {name} ...", file=out, flush=True)
        if name == "hot":
            res[name] = hot(events, rounds)
        elif name == "peer_post":
            res[name] = peer_post(events, rounds)
        elif name == "peer_noop":  # the floor (python -m bench runs it as "pgqueuer")
            from bench import peer
            res[name] = peer.pgqueuer_runs(events, rounds)
        elif name == "limit50":
            res[name] = limit50(seconds, max(rounds, 2))
        elif name == "gateway":
            res[name] = gateway()
        elif name == "slow":
            res[name] = slow(1000, 50_000, rounds)
        elif name == "limitcost":
            res[name] = limit_cost(events, rounds)
        print(f"[bench.flow] {name}: {res[name]}", file=out, flush=True)
    return res


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.flow")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--only", default=",".join(SECTIONS))
    args = parser.parse_args()
    only = tuple(n for n in args.only.split(",") if n)
    emit_json("flow", run(args.events, args.rounds, args.seconds, only))


if __name__ == "__main__":
    main()
