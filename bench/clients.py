"""HTTP client options for the worker, side by side against the same local sink.

    .venv/bin/python -m bench.clients [--requests 5000] [--concurrency 100]

Each option POSTs ``--requests`` 200-byte bodies over ``--concurrency`` lanes in this one
process, after a warm-up, to a fresh :class:`bench.sink.Sink` (aiohttp in its own
process). Reported: requests/s and this process's CPU per request (the figure that
decides how many deliveries one worker core can make). Options that keep httpx's API
(what the worker and its respx tests speak) come first.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import aiohttp
import httpx
import uvloop
from httpx_aiohttp import AiohttpTransport

from bench.common import emit_json
from bench.deliver import _lanes
from bench.leanhttp import LeanClient
from bench.sink import Sink
from outbox.delivery.outcome import Verdict
from outbox.delivery.sender import make_transport, send
from outbox.signing import generate_secret, webhook_headers

BODY = b'{"type":"invoice.paid","data":{"id":"inv_000000000001","amount":4200,' + b'"x":"' + \
    b"y" * 120 + b'"}}'

def _httpx_client(concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(limits=limits, trust_env=False)


def _client_over_transport(concurrency: int) -> httpx.AsyncClient:
    """httpx's client API over httpx-aiohttp's transport (the worker's stack before it sent
    through aiohttp directly)."""
    def session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency),
                                     trust_env=False, auto_decompress=False)

    return httpx.AsyncClient(transport=AiohttpTransport(client=session, trust_env=False),
                             trust_env=False, timeout=httpx.Timeout(15.0, connect=5.0))


async def _run_httpx(url: str, n: int, concurrency: int, clients: list[httpx.AsyncClient]
                     ) -> tuple[float, float]:
    async def lane_for(client: httpx.AsyncClient) -> Callable[[Iterator[int]], Awaitable[None]]:
        async def lane(ids: Iterator[int]) -> None:
            for _ in ids:
                response = await client.post(url, content=BODY)
                response.raise_for_status()
        return lane

    lanes = [await lane_for(clients[i % len(clients)]) for i in range(concurrency)]
    turn = iter(range(10**9))

    async def any_lane(ids: Iterator[int]) -> None:
        await lanes[next(turn) % concurrency](ids)

    try:
        return await _lanes(any_lane, n, concurrency)
    finally:
        for c in clients:
            await c.aclose()


async def _run_aiohttp(url: str, n: int, concurrency: int) -> tuple[float, float]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
        async def lane(ids: Iterator[int]) -> None:
            for _ in ids:
                async with s.post(url, data=BODY) as r:
                    await r.read()
                    r.raise_for_status()

        return await _lanes(lane, n, concurrency)


async def _run_lean(url: str, n: int, concurrency: int, signed: bool) -> tuple[float, float]:
    """bench.leanhttp's POST; ``signed``: with the worker's headers, signed per request."""
    client = LeanClient(url)
    secret = generate_secret()

    async def lane(ids: Iterator[int]) -> None:
        for i in ids:
            headers = {"content-type": "application/json"}
            if signed:
                headers.update(webhook_headers([secret], f"lean_{i:08d}", BODY))
            if await client.post(BODY, headers) != 200:
                raise RuntimeError("POST failed")

    try:
        return await _lanes(lane, n, concurrency)
    finally:
        client.close()


async def _run_transport(url: str, n: int, concurrency: int) -> tuple[float, float]:
    timeout = httpx.Timeout(15.0, connect=5.0)
    async with make_transport(max_connections=concurrency) as transport:
        async def lane(ids: Iterator[int]) -> None:
            for _ in ids:
                result = await send(transport, url, BODY, {}, timeout=timeout, total_timeout=15.0)
                if result.verdict is not Verdict.DELIVERED:
                    raise RuntimeError(f"POST failed: {result.error}")

        return await _lanes(lane, n, concurrency)


def measure(n: int, concurrency: int) -> dict[str, dict[str, float]]:
    options: dict[str, Callable[[str], Coroutine[Any, Any, tuple[float, float]]]] = {
        "httpx, default pool, one client": lambda u: _run_httpx(
            u, n, concurrency, [_httpx_client(concurrency)]),
        "httpx, one client per lane": lambda u: _run_httpx(
            u, n, concurrency, [_httpx_client(1) for _ in range(concurrency)]),
        "httpx client + httpx-aiohttp transport": lambda u: _run_httpx(
            u, n, concurrency, [_client_over_transport(concurrency)]),
        "the worker's sender (delivery.http1 behind send)": lambda u: _run_transport(
            u, n, concurrency),
        "the worker's, on uvloop": lambda u: _run_transport(u, n, concurrency),
        "aiohttp alone (no httpx API)": lambda u: _run_aiohttp(u, n, concurrency),
        "asyncio Protocol + httptools (bench.leanhttp)": lambda u: _run_lean(
            u, n, concurrency, signed=False),
        "the same, signed per request": lambda u: _run_lean(u, n, concurrency, signed=True),
    }
    results: dict[str, dict[str, float]] = {}
    for name, run in options.items():
        runner = uvloop.run if "uvloop" in name else asyncio.run
        with Sink() as sink:
            wall, cpu = runner(run(sink.url + "/c"))
        results[name] = {"per_s": n / wall, "cpu_us_per_request": 1e6 * cpu / n}
        print(f"{name:<52} {n / wall:>7,.0f} req/s  {1e6 * cpu / n:>5.0f} us CPU/request")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    emit_json("clients", measure(args.requests, args.concurrency))


if __name__ == "__main__":
    main()
