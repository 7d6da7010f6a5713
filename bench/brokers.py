"""Delivery to the brokers vs HTTP: deliveries/s and worker CPU per delivery, same run.

    .venv/bin/python -m bench.brokers [--events 3000] [--rounds 3] [--concurrency 100]

Each round drains fresh backlogs with one ``outbox worker --drain`` process
(``OUTBOX_CONCURRENCY`` = ``OUTBOX_ENDPOINT_MAX_IN_FLIGHT`` = ``--concurrency``: the one
endpoint may use the whole worker), once per destination, in this order: HTTP to the fast
receiver (:class:`bench.sink.Sink`, the reference), RabbitMQ (a topic exchange and one
durable queue: publisher confirms, persistent messages), NATS JetStream (a file stream:
each publish waits for the stream's ack) and Redis Streams (XADD, MAXLEN ~).

- Rate: deliveries/s over the span of the attempt log (first to last recorded attempt),
  so the worker's start-up (about a second of imports) is not in it; the wall time from
  the worker's start, start-up included, is in the JSON.
- CPU per delivery: marginal. Each destination is drained twice per round, ``SMALL``
  then ``--events`` deliveries; (worker rusage of the big drain - of the small one) /
  (``--events`` - ``SMALL``) takes out start-up and the first connection.

Every drain checks the destination holds exactly its number of distinct ids. Medians over
the rounds, and each broker's ratio to HTTP. Brokers at 127.0.0.1 (5672 guest/guest,
4222, 6379) must be running (``deploy/dev.py test`` starts them).

The machine is shared: other processes' CPU moves these figures; compare ratios within
one run, not across runs.

Human-readable lines, then one JSON line (``bench.common.emit_json``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from bench.backlog import emit_backlog, wait_delivered
from bench.common import SCHEMA, emit_json, scratch_database
from bench.procs import CpuMeter, Workers, children_cpu
from bench.sink import Sink
from outbox.admin import endpoints as ep

KINDS = ("http", "amqp", "nats", "redis")
SMALL = 100
SPAN_SQL = f"""SELECT extract(epoch FROM max(created_at) - min(created_at))
                 FROM {SCHEMA}.delivery_attempts"""


def _unique(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:10]}"


async def _amqp_setup(exchange: str, queue: str) -> None:
    import aio_pika

    async with await aio_pika.connect("amqp://guest:guest@127.0.0.1/") as conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue, durable=True)
        ex = await ch.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        await q.bind(ex, "#")


async def _amqp_count(exchange: str, queue: str) -> int:
    import aio_pika

    async with await aio_pika.connect("amqp://guest:guest@127.0.0.1/") as conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue, durable=True, passive=True)
        n = q.declaration_result.message_count or 0
        await q.delete(if_unused=False, if_empty=False)
        await ch.exchange_delete(exchange)
        return int(n)


async def _nats_stream(stream: str, subject: str, delete: bool) -> int:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        js = nc.jetstream()
        if not delete:
            await js.add_stream(name=stream, subjects=[subject])
            return 0
        n = (await js.stream_info(stream)).state.messages
        await js.delete_stream(stream)
        return int(n)
    finally:
        await nc.close()


async def _redis_count(stream: str) -> int:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        n = await client.xlen(stream)
        await client.delete(stream)
        return int(n)
    finally:
        await client.aclose()


def destination(kind: str, sink: Sink) -> tuple[str, Callable[[], int]]:
    """The endpoint URL of ``kind`` (set up) and how many messages it then holds."""
    if kind == "http":
        return sink.url + "/hook", lambda: sink.report.distinct
    if kind == "amqp":
        exchange, queue = _unique("ex"), _unique("q")
        asyncio.run(_amqp_setup(exchange, queue))
        return (f"amqp://guest:guest@127.0.0.1:5672/?exchange={exchange}",
                lambda: asyncio.run(_amqp_count(exchange, queue)))
    if kind == "nats":
        stream, subject = _unique("S"), _unique("s")
        asyncio.run(_nats_stream(stream, subject, delete=False))
        return (f"nats://127.0.0.1:4222?subject={subject}",
                lambda: asyncio.run(_nats_stream(stream, subject, delete=True)))
    stream = _unique("stream")
    return (f"redis://127.0.0.1:6379/0?stream={stream}&maxlen=1000000",
            lambda: asyncio.run(_redis_count(stream)))


def drain(kind: str, n: int, concurrency: int) -> dict[str, float]:
    """One worker drains ``n`` deliveries to a fresh ``kind`` destination."""
    env = {"OUTBOX_CONCURRENCY": str(concurrency),
           "OUTBOX_ENDPOINT_MAX_IN_FLIGHT": str(concurrency)}
    with scratch_database() as url, Sink() as sink:
        target, count = destination(kind, sink)
        with psycopg.connect(url, autocommit=True) as conn:
            ep.add(conn, target, schema=SCHEMA)
        emit_backlog(url, n)
        reaped = children_cpu()
        start = time.perf_counter()
        with Workers(url, 1, env, drain=True) as workers:
            wait_delivered(url, n, workers, CpuMeter(), timeout=60 + n / 50)
            elapsed = time.perf_counter() - start
            workers.wait()
            rusage = children_cpu() - reaped
        with psycopg.connect(url) as conn:
            row = conn.execute(SPAN_SQL).fetchone()
            span = float(row[0]) if row and row[0] else elapsed
        held = count() if kind != "http" else None
    held = sink.report.distinct if held is None else held
    if held != n:
        raise RuntimeError(f"{kind}: the destination holds {held} messages, expected {n}")
    return {"per_s": (n - 1) / span, "wall_per_s": n / elapsed, "rusage_s": rusage}


def measure(n: int, rounds: int, concurrency: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    for r in range(rounds):
        for kind in KINDS:
            small = drain(kind, SMALL, concurrency)
            big = drain(kind, n, concurrency)
            cpu_us = 1e6 * (big["rusage_s"] - small["rusage_s"]) / (n - SMALL)
            runs[kind].append({**big, "cpu_us": cpu_us})
            last = runs[kind][-1]
            print(f"  round {r + 1} {kind:5}: {last['per_s']:7.0f} deliveries/s,"
                  f" {last['cpu_us']:6.0f} us CPU/delivery", flush=True)
    out: dict[str, Any] = {}
    for kind in KINDS:
        out[kind] = {"per_s_median": statistics.median(x["per_s"] for x in runs[kind]),
                     "cpu_us_median": statistics.median(x["cpu_us"] for x in runs[kind]),
                     "rounds": runs[kind]}
    for kind in KINDS:
        out[kind]["rate_vs_http"] = out[kind]["per_s_median"] / out["http"]["per_s_median"]
        out[kind]["cpu_vs_http"] = out[kind]["cpu_us_median"] / out["http"]["cpu_us_median"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    print(f"{args.events} deliveries, 1 worker (concurrency {args.concurrency}), "
          f"{args.rounds} rounds; shared machine: figures are noisy, read the ratios")
    results = measure(args.events, args.rounds, args.concurrency)
    for kind in KINDS:
        r = results[kind]
        print(f"{kind:5}: median {r['per_s_median']:7.0f} deliveries/s"
              f" ({r['rate_vs_http']:.2f}x HTTP), {r['cpu_us_median']:6.0f} us CPU/delivery"
              f" ({r['cpu_vs_http']:.2f}x HTTP)")
    emit_json("brokers", {"events": args.events, "rounds": args.rounds,
                          "concurrency": args.concurrency, **results})


if __name__ == "__main__":
    main()
