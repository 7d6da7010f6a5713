"""Connection pinning: the socket goes to the address the SSRF guard checked, nothing else.

Two forms, one per HTTP stack the worker can use:

- :class:`GuardedResolver` for aiohttp (the worker's default transport): aiohttp connects
  to exactly the addresses its resolver returns, so resolving-and-checking there pins the
  connection. A host with any non-allowed address raises :class:`BlockedAddress`.
- :class:`PinnedBackend` / :class:`GuardedTransport` for httpx's own httpcore pool: the
  backend's ``connect_tcp`` resolves, checks and dials the checked IP literal.

Either way there is one lookup per new connection (no DNS rebinding window), TLS SNI and
certificate checks use the URL's hostname, and no proxy is ever used.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Iterable

import aiohttp.abc
import httpcore
import httpx

from outbox.ssrf import (
    BlockedAddress,
    IPNetwork,
    ResolutionFailed,
    Resolver,
    check_address,
    ip_literal,
    resolve,
    resolve_checked,
)

DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's


class GuardedResolver(aiohttp.abc.AbstractResolver):
    """aiohttp resolver that refuses a host unless every address it resolves to is allowed."""

    def __init__(self, allow: Iterable[IPNetwork] = (), *, resolver: Resolver | None = None,
                 timeout: float = 5.0) -> None:
        self._allow = tuple(allow)
        self._resolver = resolver
        self._timeout = timeout

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        try:
            async with asyncio.timeout(self._timeout):
                addresses = await resolve(host, port, resolver=self._resolver)
        except TimeoutError as exc:
            raise ResolutionFailed(host, f"timed out after {self._timeout}s") from exc
        for ip in addresses:
            reason = check_address(ip, self._allow)
            if reason is not None:
                raise BlockedAddress(host, ip, reason)
        return [
            {"hostname": host, "host": str(ip), "port": port,
             "family": socket.AF_INET if ip.version == 4 else socket.AF_INET6,
             "proto": 0, "flags": socket.AI_NUMERICHOST}
            for ip in addresses
        ]

    async def close(self) -> None:
        return None

    async def check_literal(self, request: httpx.Request) -> None:
        """Refuse a blocked IP-literal host; the worker's transport calls this before every
        request, since aiohttp never asks its resolver about ``http://10.0.0.1/``."""
        ip = ip_literal(request.url.host)
        if ip is not None:
            reason = check_address(ip, self._allow)
            if reason is not None:
                raise BlockedAddress(request.url.host, ip, reason)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves, checks, then connects to the checked IP.

    httpcore calls ``connect_tcp(origin_host, port)`` once per new connection and later
    ``stream.start_tls(server_hostname=origin_host)``, so only the socket address changes.
    Resolution shares the connect timeout; running out raises :class:`ResolutionFailed`.
    """

    def __init__(
        self,
        allow: Iterable[IPNetwork] = (),
        *,
        resolver: Resolver | None = None,
        backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._allow = tuple(allow)
        self._resolver = resolver
        self._backend = backend if backend is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                ip = await resolve_checked(host, port, self._allow, resolver=self._resolver)
        except TimeoutError as exc:
            raise ResolutionFailed(host, f"timed out after {timeout}s") from exc
        if timeout is not None:
            timeout = max(timeout - (time.monotonic() - started), 0.0)
        return await self._backend.connect_tcp(
            str(ip),
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` whose every connection goes through :class:`PinnedBackend`.

    No proxy and no unix socket can be configured. ``backend`` is the real network backend
    (default ``httpcore.AnyIOBackend``), injectable for tests.
    """

    def __init__(
        self,
        allow: Iterable[IPNetwork] = (),
        *,
        resolver: Resolver | None = None,
        backend: httpcore.AsyncNetworkBackend | None = None,
        verify: ssl.SSLContext | bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
        local_address: str | None = None,
        retries: int = 0,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> None:
        ssl_context = httpx.create_ssl_context(verify=verify)
        super().__init__(verify=ssl_context)
        # httpx 0.28 takes no network_backend: swap its default pool (unused) for ours.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=http1,
            http2=http2,
            local_address=local_address,
            retries=retries,
            network_backend=PinnedBackend(allow, resolver=resolver, backend=backend),
            socket_options=socket_options,
        )
