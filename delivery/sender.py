"""One webhook POST, turned into an :class:`~outbox.delivery.outcome.AttemptResult`.

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
import functools
import time
from collections.abc import Mapping

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from outbox.delivery.outcome import AttemptResult, Verdict, classify_exception, classify_status
from outbox.delivery.pinning import GuardedResolver

DEFAULT_BODY_CAP = 16384


@dataclasses.dataclass(slots=True)
class _Exchange:
    status: int | None = None
    headers: httpx.Headers = dataclasses.field(default_factory=httpx.Headers)
    body: bytearray = dataclasses.field(default_factory=bytearray)


@functools.lru_cache(maxsize=4096)
def _parsed(url: str) -> httpx.URL:
    """Endpoint URLs parsed once: httpx's URL parser is a visible share of a delivery."""
    return httpx.URL(url)


async def _exchange(
    transport: httpx.AsyncBaseTransport, request: httpx.Request, into: _Exchange, body_cap: int
) -> None:
    response = await transport.handle_async_request(request)
    try:
        into.status = response.status_code
        into.headers = response.headers
        if body_cap <= 0:
            return
        async for chunk in response.aiter_bytes():
            into.body += chunk[: body_cap - len(into.body)]
            if len(into.body) >= body_cap:
                break
    finally:
        await response.aclose()


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
    transport: httpx.AsyncBaseTransport,
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
    if not any(name.lower() == "accept-encoding" for name in headers):
        headers = {"accept-encoding": "identity", **headers}
    exchange = _Exchange()
    deadline = asyncio.timeout(total_timeout)
    failure: Exception | None = None
    started = time.perf_counter()
    try:
        async with deadline:
            request = httpx.Request("POST", _parsed(url), content=body, headers=headers,
                                    extensions={"timeout": timeout.as_dict()})
            await _exchange(transport, request, exchange, body_cap)
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


class _LiteralGuard(httpx.AsyncBaseTransport):
    """Refuses IP-literal hosts outside the allowlist before ``inner`` sees the request."""

    def __init__(self, inner: httpx.AsyncBaseTransport, resolver: GuardedResolver) -> None:
        self._inner = inner
        self._resolver = resolver

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._resolver.check_literal(request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def make_transport(
    *, max_connections: int = 100, resolver: GuardedResolver | None = None
) -> httpx.AsyncBaseTransport:
    """The worker's HTTP/1.1 keep-alive transport for :func:`send`: an httpx transport over
    aiohttp's connection pool.

    :func:`send` hands it an ``httpx.Request`` and gets an ``httpx.Response``: the worker
    speaks httpx (and respx mocks an ``httpx.AsyncHTTPTransport`` in the unit tests), but
    skips ``httpx.AsyncClient``, whose per-request work (URL merging, cookie extraction,
    auth and redirect machinery; none of which a webhook POST needs) cost a third of a
    worker's CPU (bench/README.md). httpx's own pool costs about 5x aiohttp's per request.

    ``trust_env=False``: ``HTTP(S)_PROXY``, ``NO_PROXY`` and netrc are ignored, so no
    environment setting can route a delivery around the SSRF guard, which is
    ``resolver``: aiohttp connects to exactly the addresses it returns (no second DNS
    lookup), and IP-literal hosts, which aiohttp never resolves, are checked before every
    request. There are no redirects and no cookies; httpx, not aiohttp, decodes content
    encodings, so :func:`send`'s cap applies to decoded bytes. TLS uses aiohttp's default
    context (SNI and certificate checks against the URL's host name), whose CA store is
    read when aiohttp is imported: ``SSL_CERT_FILE`` names a bundle to trust instead (one
    with a private CA, for internal receivers).
    """

    def session() -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=30.0,
            resolver=resolver, ttl_dns_cache=None if resolver is None else 0,
            use_dns_cache=resolver is None,
        )
        return aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False,
                                     cookie_jar=aiohttp.DummyCookieJar())

    transport = AiohttpTransport(client=session, trust_env=False)
    return transport if resolver is None else _LiteralGuard(transport, resolver)
