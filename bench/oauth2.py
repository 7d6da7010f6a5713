"""The cost of OAuth2 client credentials per delivery: the worker's send path
(``send_job`` over the worker transport) to a local aiohttp receiver, for a plain endpoint
and for one with OAuth2 whose token is cached, interleaved rounds (alternating which goes
first), medians and the ratio. Also counts the token requests (one expected for the
whole run). No database.

    .venv/bin/python -m bench.oauth2 [--requests 3000] [--rounds 9] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import time
import uuid

from aiohttp import web

from outbox.delivery.jobs import Job
from outbox.delivery.request import send_job
from outbox.delivery.runner import make_worker_transport
from outbox.delivery.sender import Transport
from outbox.delivery.settings import WorkerSettings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Receiver:
    """An aiohttp app answering the token endpoint and the webhook, counting tokens."""

    def __init__(self) -> None:
        self.tokens = 0
        self.app = web.Application()
        self.app.router.add_post("/token", self.token)
        self.app.router.add_post("/hook", self.hook)

    async def token(self, request: web.Request) -> web.Response:
        self.tokens += 1
        return web.json_response({"access_token": "tok", "token_type": "Bearer",
                                  "expires_in": 3600})

    async def hook(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=204)


def job(url: str, token_url: str | None) -> Job:
    return Job(delivery_id=1, attempt=1, token=uuid.uuid4(), event_id=uuid.uuid4(),
               event_type="bench", payload='{"n":1}', emitted_at=dt.datetime.now(dt.UTC),
               endpoint_id=uuid.uuid4(), url=url, enabled=True, secret=SECRET,
               previous_secret=None, headers={}, max_attempts=None, retry_base_seconds=None,
               retry_cap_seconds=None, timeout_seconds=None, oauth2_token_url=token_url,
               oauth2_client_id="bench" if token_url else None,
               oauth2_client_secret="bench-secret" if token_url else None)


async def rate(transport: Transport, settings: WorkerSettings, one: Job, n: int,
               concurrency: int) -> float:
    """Requests per second of ``n`` sends of ``one``, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def send() -> None:
        async with gate:
            result = await send_job(transport, one, settings, timestamp=int(time.time()))
            assert result.status_code == 204, result

    started = time.perf_counter()
    await asyncio.gather(*(send() for _ in range(n)))
    return n / (time.perf_counter() - started)


async def measure(n: int, rounds: int, concurrency: int) -> dict[str, object]:
    receiver = Receiver()
    runner = web.AppRunner(receiver.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    settings = WorkerSettings(allow_networks="127.0.0.0/8")
    plain_job = job(f"http://127.0.0.1:{port}/hook", None)
    oauth_job = job(f"http://127.0.0.1:{port}/hook", f"http://127.0.0.1:{port}/token")
    plain: list[float] = []
    oauth: list[float] = []
    try:
        async with make_worker_transport(settings) as transport:
            await rate(transport, settings, plain_job, n // 5, concurrency)  # warm up
            for i in range(rounds):
                order = [(plain, plain_job), (oauth, oauth_job)]
                for into, one in order[::-1] if i % 2 else order:
                    into.append(await rate(transport, settings, one, n, concurrency))
    finally:
        await runner.cleanup()
    return {"plain_per_s": statistics.median(plain), "oauth2_per_s": statistics.median(oauth),
            "ratio": statistics.median(o / p for o, p in zip(oauth, plain, strict=True)),
            "token_requests": receiver.tokens, "oauth2_deliveries": n * rounds,
            "plain_rounds": [round(x) for x in plain], "oauth2_rounds": [round(x) for x in oauth]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    out = asyncio.run(measure(args.requests, args.rounds, args.concurrency))
    print(f"plain endpoint      {out['plain_per_s']:8.0f} requests/s (median of {args.rounds})")
    print(f"OAuth2, token cached {out['oauth2_per_s']:7.0f} requests/s, median ratio of rounds"
          f" x{out['ratio']:.3f}")
    print(f"token requests: {out['token_requests']} for {out['oauth2_deliveries']} deliveries")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
