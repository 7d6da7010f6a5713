"""The fair peer: pgqueuer whose handler does what a webhook sender must -- sign the
payload (Standard Webhooks HMAC, ``outbox.signing.webhook_headers``) and POST it with
aiohttp -- on the same sink as our workers (``bench.sink``). What a user would write
instead of outbox; ``bench.peer``'s no-op drain stays as the floor.

One QueueManager (pgqueuer's default batch, 10), one shared aiohttp session (keep-alive,
100 connections, as our default concurrency); a job counts when the sink answered 200.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import uvloop
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

from bench.common import scratch_database
from bench.peer import queue_count
from outbox.signing import generate_secret, webhook_headers

ENTRYPOINT = "webhook"
PAYLOAD = {"id": 0, "total": 1999, "currency": "EUR", "customer": "cus_0123456789"}


async def prepare(url: str, n: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        payloads: list[bytes | None] = [json.dumps({**PAYLOAD, "id": i}).encode()
                                        for i in range(n)]
        await queries.enqueue([ENTRYPOINT] * n, payloads, [0] * n)
        await conn.execute(f"VACUUM ANALYZE {queries.qbq.qualified.queue_table}")
    finally:
        await conn.close()


async def drain(url: str, n: int, sink_url: str) -> dict[str, Any]:
    secret = generate_secret()
    conn = await asyncpg.connect(url)
    connector = aiohttp.TCPConnector(limit=100)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            queries = Queries(AsyncpgDriver(conn))
            qm = QueueManager(queries)
            done, failed, finished = 0, 0, 0.0

            @qm.entrypoint(ENTRYPOINT)
            async def post(job: Job) -> None:
                nonlocal done, failed, finished
                body = job.payload or b""
                headers = webhook_headers([secret], str(job.id), body,
                                          timestamp=int(time.time()))
                headers["content-type"] = "application/json"
                async with session.post(sink_url + "/pgq", data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        failed += 1
                done += 1
                if done == n:
                    finished = time.perf_counter()
                    qm.shutdown.set()

            start = time.perf_counter()
            await qm.run()
            left = await queue_count(conn, queries)
    finally:
        await conn.close()
    elapsed = finished - start
    return {"jobs": n, "seconds": round(elapsed, 3), "rate": round(n / elapsed, 1),
            "failed": failed, "left_queued": left}


def one_run(n: int) -> dict[str, Any]:
    from bench.sink import Sink

    with scratch_database() as url, Sink() as sink:
        uvloop.run(prepare(url, n))
        result = uvloop.run(drain(url, n, sink.url))
    rep = sink.report
    result["sink_requests"] = rep.requests
    span = (rep.last_request_at or 0.0) - (rep.first_request_at or 0.0)
    result["arrivals_per_s"] = round((n - 1) / span, 1) if span > 0 else None
    return result
