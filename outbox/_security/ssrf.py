"""SSRF guard: webhooks only reach public addresses, and only the address that was checked.

Threat model: endpoint URLs come from tenants, so a URL (or the DNS answer behind it) may
name loopback, a private network, cloud metadata (169.254.169.254) or another internal
service, directly or wrapped in an IPv6 transition form (::ffff:10.0.0.1, 2002:a00:1::).
A hostile DNS server may also answer differently on each lookup (DNS rebinding), so an
address checked by one lookup is not the address a later lookup would connect to.

Guarantees:

- The connection pinning in :mod:`outbox.delivery.pinning` connects only to addresses that
  passed :func:`check_address` in the same lookup: the host is resolved exactly once per
  connection and never again by the socket layer. TLS SNI, certificate verification and
  the ``Host`` header still use the URL's hostname.
- A host is refused (:class:`BlockedAddress`) if ANY of its addresses is not public,
  unless that address (or the IPv4 address it embeds) lies in an explicitly allowed
  network (``OUTBOX_ALLOW_NETWORKS``, empty by default).
- A name RFC 6761 reserves for loopback (``localhost``, ``*.localhost``, any letter case,
  with or without the trailing dot) is refused by name, before any lookup, unless the
  allowlist lets loopback through (:func:`check_name`): the answer never depends on what
  the system resolver makes of such a name.
- The same check runs at registration (:func:`check_url_sync`) and on every new delivery
  connection. :class:`BlockedAddress` and :class:`ResolutionFailed` reach the sender raised
  or in the cause chain of the transport's error (:func:`blocked_reason` finds the
  former); the sender classifies them.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias
from urllib.parse import urlsplit

from outbox._destinations import DEFAULT_PORTS, redact_url
from outbox.errors import InvalidEndpoint, OutboxError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_SETTING = "OUTBOX_ALLOW_NETWORKS"


def _table(*rows: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), reason) for cidr, reason in rows)


# Explicit lists (IANA special-purpose registries + multicast); first match wins.
# ipaddress's is_global/is_private are not used: their answers changed across Pythons.
_BLOCKED_V4 = _table(
    ("0.0.0.0/8", "'this network' 0.0.0.0/8"),
    ("10.0.0.0/8", "private network"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local, cloud metadata"),
    ("172.16.0.0/12", "private network"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private network"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_BLOCKED_V6 = _table(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo tunnel"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)
_LOOPBACK_ADDRESSES: tuple[IPAddress, ...] = (
    ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"),
)
LOOPBACK_NAME_REASON = "loopback name, RFC 6761"
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")


class BlockedAddress(OutboxError):
    """A destination resolved to an address that is not public and not allowed."""

    def __init__(self, host: str, address: IPAddress, reason: str) -> None:
        self.host = host
        self.address = address
        self.reason = reason
        what = f"{host} resolves to {address}" if host != str(address) else f"{host} is blocked"
        super().__init__(f"{what} ({reason}); set {ALLOW_SETTING} to allow it")


class ResolutionFailed(OutboxError):
    """The host could not be resolved (DNS error, no address, timeout): worth retrying."""

    def __init__(self, host: str, detail: str) -> None:
        self.host = host
        super().__init__(f"cannot resolve {host}: {detail}")


class Resolver(Protocol):
    """Turns a host name into addresses; raises ``OSError`` (e.g. ``socket.gaierror``)."""

    async def __call__(self, host: str, port: int) -> list[IPAddress]: ...


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """Parse a comma-separated CIDR list (``OUTBOX_ALLOW_NETWORKS``); blank gives ``()``.

    A bare address means a single host (/32, /128). Host bits must be zero.
    Raises ``ValueError`` naming the offending item.
    """
    networks: list[IPNetwork] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=True))
        except ValueError as exc:
            raise ValueError(f"{ALLOW_SETTING}: {item!r} is not a CIDR network: {exc}") from exc
    return tuple(networks)


def _listed(ip: IPAddress) -> str | None:
    table = _BLOCKED_V4 if ip.version == 4 else _BLOCKED_V6
    return next((reason for net, reason in table if ip in net), None)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 transition form would reach, with the form's name."""
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    if ip in _NAT64:
        return "NAT64", low32
    if ip in _V4_COMPATIBLE:  # :: and ::1 are listed, so never reach here
        return "IPv4-compatible", low32
    return None


def check_address(ip: IPAddress, allow: Sequence[IPNetwork]) -> str | None:
    """None if ``ip`` may be contacted, else a short reason (e.g. "private network").

    Allowed: any address inside ``allow``; otherwise public addresses only. IPv6 forms
    that embed IPv4 (mapped, compatible, NAT64 64:ff9b::/96, 6to4) are judged by the IPv4
    address they embed, with the same rules and the same allowlist. Teredo and the
    local-use NAT64 prefix are refused outright; IPv6 outside 2000::/3 is refused.
    """
    if any(ip in net for net in allow):
        return None
    reason = _listed(ip)
    if reason is not None:
        return reason
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            form, v4 = embedded
            inner = check_address(v4, allow)
            return None if inner is None else f"{form} {v4}: {inner}"
        if ip not in _GLOBAL_UNICAST_V6:
            return "not IPv6 global unicast"
    return None


def is_loopback_name(host: str) -> bool:
    """True for a name RFC 6761 (section 6.3) reserves for loopback: ``localhost`` and every
    name under it (``api.localhost``), in any letter case, with or without trailing dots.
    ``host`` is an ASCII (IDNA-encoded) host name, as URLs hand it over."""
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def check_name(host: str, allow: Sequence[IPNetwork]) -> None:
    """Refuse a loopback name (:func:`is_loopback_name`) by name, before any lookup.

    Such a name means the loopback address whatever the resolver answers, so it is
    refused with :class:`BlockedAddress` (127.0.0.1, "loopback name, RFC 6761") unless
    ``allow`` lets 127.0.0.1 or ::1 through; an allowed name is then resolved and its
    addresses checked as any other host's. Other names pass untouched.
    """
    if not is_loopback_name(host):
        return
    if any(check_address(ip, allow) is None for ip in _LOOPBACK_ADDRESSES):
        return
    raise BlockedAddress(host, _LOOPBACK_ADDRESSES[0], LOOPBACK_NAME_REASON)


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The default resolver: the event loop's ``getaddrinfo`` (asyncio only)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [
        ipaddress.ip_address(sockaddr[0])
        for family, _, _, _, sockaddr in infos
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(sockaddr[0], str)
    ]


@functools.lru_cache(maxsize=4096)
def ip_literal(host: str) -> IPAddress | None:
    """``host`` as an IP address if it is one (brackets allowed), else None. Remembered:
    the worker asks this of every request's host."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


async def resolve(host: str, port: int, *, resolver: Resolver | None = None) -> list[IPAddress]:
    """All addresses of ``host`` (deduplicated, resolver order); an IP literal is itself.

    Raises :class:`ResolutionFailed` if the resolver fails or returns nothing.
    """
    literal = ip_literal(host)
    if literal is not None:
        return [literal]
    try:
        addresses = await (resolver or system_resolver)(host, port)
    except (OSError, UnicodeError) as exc:
        raise ResolutionFailed(host, str(exc) or type(exc).__name__) from exc
    if not addresses:
        raise ResolutionFailed(host, "no addresses")
    return list(dict.fromkeys(addresses))


def _first_allowed(host: str, addresses: list[IPAddress], allow: Sequence[IPNetwork]) -> IPAddress:
    for ip in addresses:
        reason = check_address(ip, allow)
        if reason is not None:
            raise BlockedAddress(host, ip, reason)
    return addresses[0]


def _host_port(url: str) -> tuple[str, int]:
    try:
        parsed = urlsplit(url)
        port = parsed.port or DEFAULT_PORTS.get(parsed.scheme, 0)
        host = (parsed.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError) as exc:
        raise InvalidEndpoint(f"invalid URL {redact_url(url)!r}: {exc}") from exc
    if parsed.scheme not in DEFAULT_PORTS or not host:  # http(s) and the broker schemes
        raise InvalidEndpoint(f"URL must be http:// or https:// with a host: {url!r}")
    return host, port


SyncResolver: TypeAlias = Callable[[str, int], list[IPAddress]]


def _resolve_with_timeout(
    resolver: SyncResolver, host: str, port: int, timeout: float
) -> list[IPAddress]:
    """Run ``resolver`` in a daemon thread (never blocks interpreter exit) for ``timeout``."""
    box: list[list[IPAddress] | BaseException] = []

    def run() -> None:
        try:
            box.append(resolver(host, port))
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=run, name="outbox-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        raise ResolutionFailed(host, f"no answer within {timeout:g}s")
    result = box[0]
    if isinstance(result, (OSError, UnicodeError)):
        raise ResolutionFailed(host, str(result) or type(result).__name__) from result
    if isinstance(result, BaseException):
        raise result
    return result


def system_resolver_sync(host: str, port: int) -> list[IPAddress]:
    """The blocking default resolver for :func:`check_url_sync`: ``socket.getaddrinfo``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [
        ipaddress.ip_address(sockaddr[0])
        for family, _, _, _, sockaddr in infos
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(sockaddr[0], str)
    ]


def check_url_sync(
    url: str,
    allow: Sequence[IPNetwork],
    *,
    resolver: SyncResolver | None = None,
    timeout: float = 5.0,
) -> IPAddress:
    """Registration-time check of an endpoint URL (delivery checks again, per connection).

    A loopback name is refused by :func:`check_name` without a lookup; otherwise one
    lookup, every address must pass :func:`check_address`; returns the first address.
    The lookup runs in a daemon thread and is abandoned after ``timeout`` seconds
    (``getaddrinfo`` itself cannot be cancelled), raising :class:`ResolutionFailed`.
    Raises :class:`~outbox.errors.InvalidEndpoint` if the URL is not http(s) with a host,
    and :class:`BlockedAddress` naming the first refused address (even if others are public).
    """
    host, port = _host_port(url)
    literal = ip_literal(host)
    if literal is not None:
        return _first_allowed(host, [literal], allow)
    check_name(host, allow)
    addresses = _resolve_with_timeout(resolver or system_resolver_sync, host, port, timeout)
    if not addresses:
        raise ResolutionFailed(host, "no addresses")
    return _first_allowed(host, list(dict.fromkeys(addresses)), allow)


def blocked_reason(exc: BaseException) -> str | None:
    """The message of the :class:`BlockedAddress` in ``exc``'s cause/context chain, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, BlockedAddress):
            return str(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
