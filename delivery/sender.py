"""The one HTTP sender: a webhook POST, turned into an
:class:`~outbox.delivery.outcome.AttemptResult`.

The worker (:func:`~outbox.delivery.request.send_job`) and ``outbox endpoints ping`` both
send through :func:`send` over a :class:`Transport` (:func:`make_transport`), so the
request and its verdict are the same code for both.

Guarantees of :func:`send`:

- It returns for every network, TLS, protocol and HTTP failure, and for any other
  ``Exception`` (as RETRY "internal"); only ``BaseException``s that are not ``Exception``
  (``asyncio.CancelledError``, ``KeyboardInterrupt``...) propagate.
- Redirects are never followed: exactly one request per call.
- ``timeout.connect`` bounds connecting (the socket connect; a DNS lookup is bounded by
  the resolver's own timeout), ``timeout.read`` each wait for response bytes, and
  ``total_timeout`` the whole exchange, so a receiver trickling bytes cannot hold a
  worker slot longer than that (the deadline fires up to :attr:`Deadlines.RESOLUTION`,
  50 ms, late; never early).
- The verdict is decided by the status line once one arrived: a failure or the deadline
  while reading the response body only shortens the excerpt and is noted in ``error``
  (a 2xx stays DELIVERED; the receiver already accepted the event).
- At most ``body_cap`` bytes of the decoded body are kept, and reading stops there.
  ``Accept-Encoding: identity`` is requested (callers may override it); a ``gzip`` or
  ``deflate`` body sent anyway is inflated here with zlib's ``max_length``, never more
  than the cap, so a compression bomb costs one cap of memory. Other encodings (``br``,
  ``zstd``, a list) are kept as received.

The HTTP client: :mod:`outbox.delivery.http1` (keep-alive HTTP/1.1 over asyncio, answers
parsed by httptools): 29 us of CPU per request where aiohttp's ``ClientSession`` took 103
us and httpx's client 330 or more (``python -m bench.clients``, docs/performance.md), the
largest part of a worker's CPU per delivery. :func:`send` accepts an ``httpx.Timeout`` as
``timeout`` (anything with ``connect`` and ``read``), and
:func:`~outbox.delivery.outcome.classify_exception` still maps httpx's and aiohttp's
exception trees, for callers that send with those themselves (aiohttp: OAuth2 token
requests).
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from outbox.admin._endpoint_auth import client_context
from outbox.delivery.http1 import Pool
from outbox.delivery.oauth2 import TokenCache
from outbox.delivery.outcome import AttemptResult, classify_attempt
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.transports import Brokers

DEFAULT_BODY_CAP = 16384
CLIENT_CONTEXTS_MAX = 256
ClientCert = tuple[str, str]
"""A TLS client certificate (chain) and its private key, PEM."""
_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class Timeouts(Protocol):
    """Phase timeouts in seconds (None: only the total bounds it); ``httpx.Timeout`` fits."""

    @property
    def connect(self) -> float | None: ...

    @property
    def read(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class PhaseTimeouts:
    """The worker's :class:`Timeouts`."""

    connect: float | None
    read: float | None = None


class _Exchange:
    __slots__ = ("body", "headers", "status")

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: Mapping[str, str] = _NO_HEADERS
        self.body = bytearray()


class Deadlines:
    """The total deadlines of a transport's exchanges in flight, kept by one ticker task.

    :func:`send` registers its task and deadline before the exchange and settles it right
    after (no ``await`` in between, so a cancel from here always lands inside the
    exchange). While any is registered, the ticker wakes every :attr:`RESOLUTION` seconds
    and cancels, once, each task past its deadline, marking it expired (the caller turns
    that cancel back into a timeout, as ``asyncio.timeout`` does: ``Task.uncancel``).
    A deadline therefore fires up to :attr:`RESOLUTION` late, never early. Per request
    this is two dict operations where ``asyncio.timeout`` allocates a timer, pushes it
    on the loop's heap and cancels it: measurably cheaper.
    """

    RESOLUTION = 0.05

    def __init__(self) -> None:
        self._due: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._earliest = math.inf
        self._ticker: asyncio.Task[None] | None = None

    def add(self, task: asyncio.Task[Any], deadline: float) -> None:
        self._due[task] = deadline
        self._earliest = min(self._earliest, deadline)
        ticker = self._ticker
        if ticker is None or ticker.get_loop() is not task.get_loop():  # (a new event loop)
            self._ticker = task.get_loop().create_task(self._tick())

    def settle(self, task: asyncio.Task[Any]) -> bool:
        """Unregister ``task``; True if its deadline fired (its cancel is then undone)."""
        self._due.pop(task, None)
        if not self._expired or task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return True

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._due:
                await asyncio.sleep(self.RESOLUTION)
                now = loop.time()
                if now < self._earliest:
                    continue
                self._earliest = math.inf
                for task, deadline in list(self._due.items()):
                    if task.done():  # left unsettled (a BaseException went through)
                        self._due.pop(task, None)
                        self._expired.discard(task)
                    elif deadline > now:
                        self._earliest = min(self._earliest, deadline)
                    elif task not in self._expired:
                        self._expired.add(task)
                        task.cancel()
        finally:
            if self._ticker is asyncio.current_task():
                self._ticker = None

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()


class Transport:
    """The worker's HTTP/1.1 keep-alive client for :func:`send` (:attr:`http`, a
    :class:`~outbox.delivery.http1.Pool`), and the aiohttp session of OAuth2 token
    requests (:meth:`session`).

    No proxy, netrc or other environment setting applies, so nothing can route a
    delivery around the SSRF guard, which is ``resolver``: connections are made to exactly
    the addresses it returns (no second DNS lookup), and IP-literal hosts are checked
    before every request (:meth:`GuardedResolver.check_literal`). Redirects are not
    followed, no cookie is kept or sent, and content encodings are decoded by the sender
    under its cap. TLS uses :meth:`default_ssl` (SNI and certificate checks against the
    URL's host name; the CA store is read once: ``SSL_CERT_FILE`` names a bundle to trust
    instead, one with a private CA for internal receivers).

    An endpoint with a TLS client certificate gets its own ``SSLContext`` (the default
    checks, plus the certificate: :meth:`client_ssl`), one per distinct certificate and
    key: connections are pooled per context, so a connection made with one endpoint's
    certificate never serves another's request, and a rotated certificate is used from
    the next claim on (at most :data:`CLIENT_CONTEXTS_MAX` contexts are kept; the oldest
    is dropped first).

    ``async with`` (or :meth:`aclose`) closes the connections, the session and the broker
    connections of :attr:`brokers` (the destinations whose URL is not http(s):
    :mod:`outbox.delivery.transports`, guarded by the same resolver).
    """

    def __init__(self, *, max_connections: int = 100,
                 resolver: GuardedResolver | None = None) -> None:
        self.max_connections = max_connections
        self.resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}
        self._client_contexts: dict[ClientCert, ssl.SSLContext] = {}
        self._default_ssl: ssl.SSLContext | None = None
        self.http = Pool(max_connections=max_connections, resolver=resolver)
        self.deadlines = Deadlines()
        self.brokers = Brokers(resolver)
        self.tokens = TokenCache()  # OAuth2 access tokens of this process (.oauth2)

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            resolver = self.resolver
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, keepalive_timeout=30.0,
                resolver=resolver, ttl_dns_cache=None if resolver is None else 0,
                use_dns_cache=resolver is None,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    def target(self, url: str) -> URL:
        """``url`` parsed (once per distinct URL), its host checked if it is an IP literal;
        raises :class:`~outbox._security.ssrf.BlockedAddress` if that address is not allowed."""
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= 4096:
                self._urls.clear()
            parsed = self._urls[url] = URL(url)
        if self.resolver is not None:
            self.resolver.check_literal(parsed.raw_host or "")
        return parsed

    def client_ssl(self, cert: ClientCert) -> ssl.SSLContext:
        """The ``SSLContext`` presenting ``cert`` (made once per distinct pair)."""
        context = self._client_contexts.get(cert)
        if context is None:
            if len(self._client_contexts) >= CLIENT_CONTEXTS_MAX:
                del self._client_contexts[next(iter(self._client_contexts))]
            context = self._client_contexts[cert] = client_context(*cert)
        return context

    async def exchange(self, url: str, body: bytes, headers: Mapping[str, str],
                       timeout: Timeouts, body_cap: int, into: _Exchange,
                       client_cert: ClientCert | None = None) -> None:
        """One POST; the status, headers and at most ``body_cap`` decoded body bytes land
        in ``into`` as they arrive (so a caller's deadline keeps what was read)."""
        target = self.target(url)
        if target.scheme == "https":
            context = self.default_ssl() if client_cert is None else self.client_ssl(client_cert)
        elif target.scheme == "http":
            context = None
        else:
            raise ValueError(f"not an http(s) URL: {target.scheme}")
        await self.http.post(target, body, headers, connect=timeout.connect,
                             read=timeout.read, body_cap=body_cap, into=into,
                             context=context)

    def default_ssl(self) -> ssl.SSLContext:
        """The context of every https request without a client certificate: the default
        checks, the CA store of ``SSL_CERT_FILE`` or the system (read once)."""
        if self._default_ssl is None:
            self._default_ssl = ssl.create_default_context()
        return self._default_ssl

    async def aclose(self) -> None:
        self.deadlines.close()
        self.http.close()
        await self.brokers.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Transport:
        self.session()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


def make_transport(*, max_connections: int = 100,
                   resolver: GuardedResolver | None = None) -> Transport:
    """The :class:`Transport` for :func:`send` (``resolver``: the SSRF guard, which
    :func:`~outbox.delivery.runner.make_worker_transport` always sets)."""
    return Transport(max_connections=max_connections, resolver=resolver)


async def send(
    transport: Transport,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout: Timeouts,
    total_timeout: float,
    body_cap: int = DEFAULT_BODY_CAP,
    client_cert: ClientCert | None = None,
) -> AttemptResult:
    """POST ``body`` to ``url`` once and classify the outcome (see module guarantees).
    ``client_cert``: present this TLS client certificate (:meth:`Transport.client_ssl`).

    ``duration_ms`` runs from just before the request to the end of the body read.
    ``response_excerpt`` is the kept body decoded as UTF-8 (invalid bytes replaced), so it
    has at most ``body_cap`` characters; None if no status arrived or the body was empty.
    """
    if not any(name.lower() == "accept-encoding" for name in headers):
        headers = {"accept-encoding": "identity", **headers}
    exchange = _Exchange()
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("send() must run in a task")
    deadlines = transport.deadlines
    failure: BaseException | None = None
    started = time.perf_counter()
    deadlines.add(task, asyncio.get_running_loop().time() + total_timeout)
    try:
        await transport.exchange(url, body, headers, timeout, body_cap, exchange, client_cert)
    except asyncio.CancelledError as exc:
        failure = exc
    except Exception as exc:
        failure = exc
    finally:
        expired = deadlines.settle(task)
    if isinstance(failure, asyncio.CancelledError):
        if not expired or task.cancelling():
            raise failure  # cancelled from outside (too): that wins
        failure = TimeoutError()
    return classify_attempt(
        exchange.status, exchange.headers, bytes(exchange.body) if exchange.body else b"",
        failure, expired=expired, total_timeout=total_timeout,
        duration_ms=(time.perf_counter() - started) * 1000.0)
