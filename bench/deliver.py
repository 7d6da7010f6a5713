"""End-to-end webhook delivery: throughput of worker processes and emit-to-arrival latency.

    .venv/bin/python -m bench.deliver [--events 20000] [--concurrency 100] [--rate 200]
        [--seconds 10] [--skip-throughput] [--skip-latency] [--endpoint-cap N]

Each measurement gets a fresh scratch database, one endpoint and a fresh
:class:`bench.sink.Sink` (aiohttp in its own process: 200, empty body, records each
``webhook-id``'s first arrival). Workers are ``python -m outbox worker`` processes with
``OUTBOX_CONCURRENCY=--concurrency`` (and ``OUTBOX_ENDPOINT_MAX_IN_FLIGHT=--endpoint-cap``).

- Raw reference: the worker's HTTP stack without a queue (``make_transport`` + ``send``,
  ``webhook_headers``-signed, ``--concurrency`` lanes in this process, warmed up), and
  bare ``aiohttp`` for scale: requests/s and this process's CPU per request.
- Throughput: ``--events`` events emitted with ``emit_many`` (1,000 per transaction),
  then K = 1 and K = 2 ``--drain`` workers; the clock runs from their start (start-up
  included) until the database shows all ``delivered``. Also: the sink's first-to-last
  arrival rate, duplicates, the ratio to the raw rate, claims per delivery (over 1 when
  claimed rows are handed back, e.g. at the per-endpoint cap), and CPU seconds from
  ``/proc``: workers, sink, this process, the scratch database's backends (``pg_db``),
  other PostgreSQL processes (``pg_other``) and the rest (``other``: on a shared
  machine, other people's work -- a sign of a noisy run). Worker CPU per delivery is the
  workers' own rusage (start-up to exit, read once they exited) over the deliveries.
- Bare loop: 2 ``bench.bareloop`` processes drain the same backlog (the floor of CPU per
  delivery: claim, HMAC, aiohttp POST, one completion statement, nothing else); its CPU
  per delivery (rusage) and the 2 workers' ratio to it (``bench.cpu`` repeats this).
- Latency: one running worker; this process emits one event per transaction at
  ``--rate``/s for ``--seconds`` (sleep-paced, one connection) and notes ``time.time()``
  after each commit; latency = sink first arrival - commit (p50/p90/p99/max), with the
  default idle poll interval (0.05 s) and with ``OUTBOX_POLL_INTERVAL_SECONDS=0.02``.

Human-readable lines, then one JSON line (``bench.common.emit_json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import httpx
import psycopg

import outbox
from bench import cpu
from bench.backlog import PAYLOAD, add_endpoint, emit_backlog, wait_delivered
from bench.common import SCHEMA, emit_json, percentiles, scratch_database
from bench.procs import CpuMeter, Workers, children_cpu
from bench.sink import Sink
from outbox import Event
from outbox.delivery.outcome import Verdict
from outbox.delivery.sender import make_transport, send
from outbox.signing import generate_secret, webhook_headers


def _roles(workers: Workers, sink: Sink) -> dict[str, set[int]]:
    return {"workers": workers.pids(), "sink": {sink.pid or -1}, "bench": {os.getpid()}}


async def _lanes(lane: Callable[[Iterator[int]], Awaitable[None]], n: int,
                 concurrency: int) -> tuple[float, float]:
    """Warm up (``concurrency`` requests), then ``n`` requests over ``concurrency`` lanes:
    (wall seconds, this process's CPU seconds) of the ``n``."""
    warm = iter(range(-concurrency, 0))
    await asyncio.gather(*(lane(warm) for _ in range(concurrency)))
    ids = iter(range(n))
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(lane(ids) for _ in range(concurrency)))
    return time.perf_counter() - wall, time.process_time() - cpu


async def _stack_posts(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """Signed POSTs through the worker's HTTP stack: ``make_transport`` + ``send``."""
    secret, body = generate_secret(), json.dumps(PAYLOAD).encode()
    timeout = httpx.Timeout(15.0, connect=5.0)
    failures = 0

    async def lane(ids: Iterator[int]) -> None:
        nonlocal failures
        for i in ids:
            headers = webhook_headers([secret], f"raw_{i:08d}", body)
            headers["content-type"] = "application/json"
            result = await send(transport, url, body, headers, timeout=timeout,
                                  total_timeout=15.0)
            failures += result.verdict is not Verdict.DELIVERED

    async with make_transport(max_connections=concurrency) as transport:
        timing = await _lanes(lane, n, concurrency)
    if failures:
        raise RuntimeError(f"raw reference: {failures} requests failed")
    return timing


async def _aiohttp_posts(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """Unsigned POSTs with a bare aiohttp session: the floor of the HTTP client cost."""
    body = json.dumps(PAYLOAD).encode()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:

        async def lane(ids: Iterator[int]) -> None:
            for i in ids:
                async with s.post(url, data=body, headers={"webhook-id": f"aio_{i:08d}"}) as r:
                    await r.read()
                    r.raise_for_status()

        return await _lanes(lane, n, concurrency)


def raw_reference(n: int, concurrency: int) -> dict[str, Any]:
    """POST rates and client CPU of the HTTP stack alone (one process), fresh sink each."""
    with Sink() as sink:
        stack, stack_cpu = asyncio.run(_stack_posts(sink.url + "/raw", n, concurrency))
    if sink.report.distinct != n + concurrency:
        raise RuntimeError(f"raw reference: sink saw {sink.report.distinct} ids")
    with Sink() as bare_sink:
        bare, bare_cpu = asyncio.run(_aiohttp_posts(bare_sink.url + "/raw", n, concurrency))
    return {"stack_per_s": n / stack, "stack_cpu_us_per_request": 1e6 * stack_cpu / n,
            "aiohttp_only_per_s": n / bare, "aiohttp_only_cpu_us_per_request": 1e6 * bare_cpu / n,
            "sink_cpu_us_per_request": 1e6 * sink.report.cpu_seconds / sink.report.requests,
            "sink_loop": sink.report.loop}


def throughput(n: int, k: int, env: dict[str, str], signature: str = "hmac"
               ) -> dict[str, Any]:
    """Drain a backlog of ``n`` deliveries with ``k`` worker processes (to an endpoint
    signing with ``signature``: bench.signatures compares the schemes)."""
    with scratch_database() as url, Sink() as sink:
        add_endpoint(url, sink.url, signature)
        emit_backlog(url, n)
        meter = CpuMeter()
        reaped = children_cpu()
        start = time.perf_counter()
        with Workers(url, k, env, drain=True) as workers:
            wait_delivered(url, n, workers, meter, timeout=60 + n / 100)
            elapsed = time.perf_counter() - start
            cpu = meter.split(_roles(workers, sink))
            workers.wait()  # --drain: they exit by themselves
            rusage = children_cpu() - reaped  # the workers' own, start-up to exit
            counters = workers.counters()
    rep = sink.report
    if rep.distinct != n:
        raise RuntimeError(f"sink saw {rep.distinct} distinct ids, expected {n}")
    span = (rep.last_request_at or 0.0) - (rep.first_request_at or 0.0)
    return {"workers": k, "seconds": elapsed, "deliveries_per_s": n / elapsed,
            "sink_span_per_s": (n - 1) / span if span > 0 else None,
            "requests": rep.requests, "duplicates": rep.duplicates, "cpu_seconds": cpu,
            "worker_rusage_cpu_s": round(rusage, 3),
            "worker_cpu_us_per_delivery": round(1e6 * rusage / n, 1),
            "worker_counters": counters}


def _paced_emit(conn: psycopg.Connection[Any], rate: float, seconds: float
                ) -> tuple[list[tuple[str, float]], float]:
    """Emit ``rate * seconds`` events, one per transaction; (id, commit time) and seconds."""
    commits: list[tuple[str, float]] = []
    start = time.perf_counter()
    for i in range(round(rate * seconds)):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        with conn.transaction():
            event_id = outbox.emit(conn, Event("order.created", {**PAYLOAD, "id": i}),
                                   schema=SCHEMA)
        commits.append((str(event_id), time.time()))
    return commits, time.perf_counter() - start


def latency(rate: float, seconds: float, env: dict[str, str], poll: float | None
            ) -> dict[str, Any]:
    """Emit at a steady rate with one worker running; commit-to-arrival latency."""
    if poll is not None:
        env = {**env, "OUTBOX_POLL_INTERVAL_SECONDS": str(poll)}
    with scratch_database() as url, Sink() as sink:
        add_endpoint(url, sink.url)
        with Workers(url, 1, env, drain=False) as workers, \
                psycopg.connect(url, autocommit=True) as conn:
            _paced_emit(conn, 1, 1)  # warm-up: the worker is up and connected
            wait_delivered(url, 1, workers, CpuMeter(), timeout=60)
            meter = CpuMeter()
            commits, took = _paced_emit(conn, rate, seconds)
            wait_delivered(url, 1 + len(commits), workers, meter, timeout=seconds + 60)
            cpu = meter.split(_roles(workers, sink))
            workers.wait(terminate=True)
            counters = workers.counters()
    arrivals = sink.report.first_arrival
    missing = [i for i, _ in commits if i not in arrivals]
    if missing:
        raise RuntimeError(f"{len(missing)} events never reached the sink")
    ms = [(arrivals[i] - t) * 1000 for i, t in commits]
    return {"poll_interval_s": poll if poll is not None else 0.05, "rate": rate,
            "events": len(commits), "achieved_rate": len(commits) / took,
            "latency_ms": percentiles(ms), "duplicates": sink.report.duplicates,
            "cpu_seconds": cpu, "worker_counters": counters}


def _print_cpu(cpu: dict[str, float], per: int) -> None:
    parts = "  ".join(f"{k} {v:.1f}" for k, v in cpu.items() if k != "machine_busy_fraction")
    print(f"    CPU s: {parts}  (machine {100 * cpu['machine_busy_fraction']:.0f}% busy;"
          f" per delivery: workers {1e6 * cpu['workers'] / per:.0f} us,"
          f" pg_db {1e6 * cpu['pg_db'] / per:.0f} us)", flush=True)


def _claims(counters: dict[str, int]) -> str:
    """Claims per delivery: above 1 when claimed rows were handed back (endpoint cap)."""
    done = counters.get("delivered", 0)
    return f"{counters.get('claimed', 0) / done:.2f} claims/delivery" if done else "no counters"


def _print_raw(raw: dict[str, Any]) -> None:
    print(f"raw HTTP stack (make_transport + send), 1 process  {raw['stack_per_s']:,.0f} req/s"
          f"  ({raw['stack_cpu_us_per_request']:.0f} us CPU/request; sink"
          f" {raw['sink_cpu_us_per_request']:.0f} us CPU/request)")
    print(f"bare aiohttp client, 1 process                  {raw['aiohttp_only_per_s']:,.0f}"
          f" req/s  ({raw['aiohttp_only_cpu_us_per_request']:.0f} us CPU/request)", flush=True)


def _print_throughput(t: dict[str, Any], n: int) -> None:
    print(f"drain {n:,} events, {t['workers']} worker process(es)      "
          f"{t['deliveries_per_s']:,.0f} deliveries/s = {t['ratio_to_raw']:.2f}x raw"
          f"  ({t['seconds']:.1f} s; sink first-to-last {t['sink_span_per_s'] or 0:,.0f}/s;"
          f" duplicates {t['duplicates']})")
    print(f"    worker CPU per delivery {t['worker_cpu_us_per_delivery']:.0f} us (the workers'"
          f" rusage, start-up included), of which the raw HTTP stack's cost per request is"
          f" {100 * t['stack_share_of_worker_cpu']:.0f}%; {_claims(t['worker_counters'])}")
    _print_cpu(t["cpu_seconds"], n)


def bareloop_reference(n: int, concurrency: int) -> dict[str, Any]:
    """2 ``bench.bareloop`` processes drain the same backlog: the floor of CPU per delivery
    (their rusage, start-up included, as the workers' figure)."""
    run = cpu.drain("bareloop", n, 2, concurrency)
    run["cpu_us_per_delivery"] = round(1e6 * run["cpu_s"] / n, 1)
    return run


def _print_bareloop(bare: dict[str, Any], workers: dict[str, Any]) -> None:
    ratio = workers["worker_cpu_us_per_delivery"] / bare["cpu_us_per_delivery"]
    print(f"bare loop (bench.bareloop), 2 processes        {bare['deliveries_per_s']:,.0f}"
          f" deliveries/s, CPU per delivery {bare['cpu_us_per_delivery']:.0f} us;"
          f" 2 workers / bare loop: {ratio:.2f}x CPU per delivery", flush=True)


def _print_latency(lat: dict[str, Any]) -> None:
    q = lat["latency_ms"]
    print(f"latency at {lat['rate']:g}/s (achieved {lat['achieved_rate']:.0f}/s),"
          f" poll {lat['poll_interval_s']:g} s   p50 {q['p50']:.1f}  p90 {q['p90']:.1f}"
          f"  p99 {q['p99']:.1f}  max {q['max']:.1f} ms  (duplicates {lat['duplicates']};"
          f" {_claims(lat['worker_counters'])})")
    _print_cpu(lat["cpu_seconds"], lat["events"])


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--endpoint-cap", type=int, default=None,
                        help="OUTBOX_ENDPOINT_MAX_IN_FLIGHT for the workers (default: unset)")
    args = parser.parse_args()
    # SIGTERM (and SIGINT, even if inherited as ignored) unwind through the finally blocks
    # that stop the workers and the sink and drop the scratch database.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    env = {"OUTBOX_CONCURRENCY": str(args.concurrency)}
    if args.endpoint_cap is not None:
        env["OUTBOX_ENDPOINT_MAX_IN_FLIGHT"] = str(args.endpoint_cap)
    res: dict[str, Any] = {"events": args.events, "concurrency": args.concurrency,
                           "endpoint_cap": args.endpoint_cap}
    if not args.skip_throughput:
        raw = res["raw"] = raw_reference(args.events, args.concurrency)
        _print_raw(raw)
        res["throughput"] = []
        for k in (1, 2):
            t = throughput(args.events, k, env)
            t["ratio_to_raw"] = t["deliveries_per_s"] / raw["stack_per_s"]
            t["stack_share_of_worker_cpu"] = (raw["stack_cpu_us_per_request"]
                                              / t["worker_cpu_us_per_delivery"])
            res["throughput"].append(t)
            _print_throughput(t, args.events)
        res["bareloop"] = bare = bareloop_reference(args.events, args.concurrency)
        _print_bareloop(bare, res["throughput"][-1])
    if not args.skip_latency:
        res["latency"] = []
        for poll in (None, 0.02):
            res["latency"].append(latency(args.rate, args.seconds, env, poll))
            _print_latency(res["latency"][-1])
    emit_json("deliver", res)


if __name__ == "__main__":
    main()
