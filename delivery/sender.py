"""One webhook POST, turned into an :class:`~delivery.outcome.AttemptResult`.

Guarantees of :func:`send`:

- It returns for every network, TLS, protocol and HTTP failure, and for any other
  ``Exception`` (as RETRY "internal"); only ``BaseException``s that are not ``Exception``
  (``asyncio.CancelledError``, ``KeyboardInterrupt``...) propagate.
- Redirects are never followed: exactly one request per call.
- ``total_timeout`` bounds the whole exchange, on top of httpx's per-phase timeouts, so a
  receiver trickling bytes cannot hold a worker slot longer than that.
- The verdict is decided by the status line once one arrived: a failure or the deadline
  while reading the response body only shortens the excerpt and is noted in ``error``
  (a 2xx stays DELIVERED; the receiver already accepted the event).
- At most ``body_cap`` bytes of the decoded body are kept, and reading stops there.
  ``Accept-Encoding: identity`` is requested (callers may override it); if a receiver
  compresses anyway, httpx inflates one network read (at most 64 KiB raw) at a time, so
  the worst transient cost of a compression bomb is about 1000x that, not the whole body.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping

import aiohttp
import aiohttp.abc
import httpx
from httpx_aiohttp import AiohttpTransport

from delivery.outcome import AttemptResult, Verdict, classify_exception, classify_status
from delivery.pinning import GuardedResolver

DEFAULT_BODY_CAP = 16384


@dataclasses.dataclass(slots=True)
class _Exchange:
    status: int | None = None
    headers: httpx.Headers = dataclasses.field(default_factory=httpx.Headers)
    body: bytearray = dataclasses.field(default_factory=bytearray)


async def _exchange(
    client: httpx.AsyncClient,
    into: _Exchange,
    *,
    url: str,
    body: bytes,
    headers: httpx.Headers,
    timeout: httpx.Timeout,
    body_cap: int,
) -> None:
    async with client.stream(
        "POST", url, content=body, headers=headers, timeout=timeout, follow_redirects=False
    ) as response:
        into.status = response.status_code
        into.headers = response.headers
        if body_cap <= 0:
            return
        async for chunk in response.aiter_bytes():
            into.body += chunk[: body_cap - len(into.body)]
            if len(into.body) >= body_cap:
                break


def _deadline_result(total_timeout: float, duration_ms: float) -> AttemptResult:
    return AttemptResult(
        verdict=Verdict.RETRY,
        status_code=None,
        duration_ms=duration_ms,
        error_class="timeout",
        error=f"total timeout after {total_timeout:.1f}s",
        response_excerpt=None,
        retry_after_seconds=None,
    )


async def send(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout: httpx.Timeout,
    total_timeout: float,
    body_cap: int = DEFAULT_BODY_CAP,
) -> AttemptResult:
    """POST ``body`` to ``url`` once and classify the outcome (see module guarantees).

    ``duration_ms`` runs from just before the request to the end of the body read.
    ``response_excerpt`` is the kept body decoded as UTF-8 (invalid bytes replaced), so it
    has at most ``body_cap`` characters; None if no status arrived or the body was empty.
    """
    request_headers = httpx.Headers({"accept-encoding": "identity"})
    request_headers.update(headers)
    exchange = _Exchange()
    deadline = asyncio.timeout(total_timeout)
    failure: Exception | None = None
    started = time.perf_counter()
    try:
        async with deadline:
            await _exchange(
                client,
                exchange,
                url=url,
                body=body,
                headers=request_headers,
                timeout=timeout,
                body_cap=body_cap,
            )
    except Exception as exc:
        failure = exc
    duration_ms = (time.perf_counter() - started) * 1000.0

    if exchange.status is None:
        if deadline.expired():
            return _deadline_result(total_timeout, duration_ms)
        return classify_exception(failure or RuntimeError("no response"), duration_ms)

    excerpt = exchange.body.decode("utf-8", errors="replace") if exchange.body else None
    result = classify_status(exchange.status, exchange.headers, excerpt, duration_ms)
    if failure is None:
        return result
    cause = "total timeout" if deadline.expired() else type(failure).__name__
    note = f"body not fully read: {cause}"
    return dataclasses.replace(result, error=f"{result.error}; {note}" if result.error else note)


def make_client(
    *, max_connections: int = 100, resolver: GuardedResolver | None = None
) -> httpx.AsyncClient:
    """The worker's HTTP/1.1 keep-alive client for :func:`send`: httpx's API over aiohttp.

    httpx's own connection pool costs about 5x more CPU per request than aiohttp's on this
    hardware (bench/README.md), so requests go through the ``httpx-aiohttp`` transport;
    callers and tests still speak httpx (respx mocks a plain ``httpx.AsyncClient``).

    ``trust_env=False`` on both layers: ``HTTP(S)_PROXY``, ``NO_PROXY`` and netrc are
    ignored, so no environment setting can route a delivery around the SSRF guard, which
    is ``resolver``: aiohttp connects to exactly the addresses it returns (no second DNS
    lookup), and its request hook refuses IP-literal hosts, which aiohttp never resolves.
    Redirects are off; httpx, not aiohttp, decodes content encodings, so :func:`send`'s
    cap applies to decoded bytes.
    """

    def session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=30.0,
            resolver=resolver, ttl_dns_cache=None if resolver is None else 0,
            use_dns_cache=resolver is None,
        )
        return aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False)

    transport = AiohttpTransport(client=session, trust_env=False)
    hooks = {"request": [resolver.check_literal]} if resolver is not None else {}
    return httpx.AsyncClient(
        transport=transport,
        event_hooks=hooks,
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(15.0, connect=5.0),
    )
