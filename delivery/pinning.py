"""Connection pinning: the socket goes to the address the SSRF guard checked, nothing else.

:class:`GuardedResolver` is the resolver of the worker's aiohttp connector
(:class:`outbox.delivery.sender.Transport`). aiohttp connects to exactly the addresses
its resolver returns, so resolving-and-checking there pins the connection: one lookup per
new connection (no DNS rebinding window), and a host with any non-allowed address raises
:class:`BlockedAddress`, as does a name RFC 6761 reserves for loopback (``*.localhost``),
refused by name before any lookup unless loopback is allowed
(:func:`~outbox._security.ssrf.check_name`).
IP-literal hosts, which aiohttp never hands to its resolver, are checked by
:meth:`GuardedResolver.check_literal` before every request. TLS SNI and certificate checks
use the URL's hostname, and no proxy is ever used.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

import aiohttp.abc

from outbox._security.ssrf import (
    BlockedAddress,
    IPAddress,
    IPNetwork,
    ResolutionFailed,
    Resolver,
    check_address,
    check_name,
    ip_literal,
    resolve,
)


class GuardedResolver(aiohttp.abc.AbstractResolver):
    """aiohttp resolver that refuses a host unless every address it resolves to is allowed."""

    def __init__(self, allow: Iterable[IPNetwork] = (), *, resolver: Resolver | None = None,
                 timeout: float = 5.0) -> None:
        self._allow = tuple(allow)
        self._resolver = resolver
        self._timeout = timeout
        self._literals: dict[str, BlockedAddress | None] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        check_name(host, self._allow)  # by name: whatever the resolver would answer
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

    def check_literal(self, host: str) -> None:
        """Refuse a blocked IP-literal ``host`` (raise :class:`BlockedAddress`); the sender
        calls this before every request, since aiohttp never asks its resolver about
        ``http://10.0.0.1/``. A name is left to :meth:`resolve`.

        A numeric host such as ``127.1`` or ``2130706433`` is judged as the address
        ``inet_aton`` makes of it: aiohttp takes any all-digits-and-dots host for an IP
        literal and skips its resolver, and older aiohttp versions (the worker accepts 3.10
        and later) then let the socket layer connect to that address. The verdict on each
        host is remembered (it depends only on the host and the allowlist, both fixed).
        """
        try:
            refusal = self._literals[host]
        except KeyError:
            refusal = self._judge_literal(host)
            if len(self._literals) >= 4096:
                self._literals.clear()
            self._literals[host] = refusal
        if refusal is not None:
            raise BlockedAddress(refusal.host, refusal.address, refusal.reason)

    def _judge_literal(self, host: str) -> BlockedAddress | None:
        ip = literal_address(host)
        if ip is None:
            return None
        reason = check_address(ip, self._allow)
        return None if reason is None else BlockedAddress(host, ip, reason)


def literal_address(host: str) -> IPAddress | None:
    """The address an IP-literal ``host`` names (also a numeric one such as ``127.1``, as
    ``inet_aton`` reads it), None for a name: the sender connects to exactly this address,
    the one :meth:`GuardedResolver.check_literal` judged, and asks the resolver for any
    other host."""
    return ip_literal(host) or _numeric_ipv4(host)


def _numeric_ipv4(host: str) -> IPAddress | None:
    if not host.replace(".", "").isdigit():
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, UnicodeError):
        return None
