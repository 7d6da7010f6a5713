"""SSRF guard, pure parts: address rules, allowlist parsing, resolution with stub resolvers."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import httpx
import pytest

from outbox._security.ssrf import (
    BlockedAddress,
    IPAddress,
    IPNetwork,
    ResolutionFailed,
    blocked_reason,
    check_address,
    check_url_sync,
    parse_networks,
    resolve,
)
from outbox.delivery.pinning import GuardedResolver
from outbox.errors import InvalidEndpoint, OutboxError

ip = ipaddress.ip_address
NO_ALLOW: tuple[IPNetwork, ...] = ()

BLOCKED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.255", "carrier-grade NAT"),
    ("0.0.0.0", "this network"),
    ("0.1.2.3", "this network"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.255", "benchmarking"),
    ("240.0.0.1", "reserved"),
    ("192.0.0.170", "IETF"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("192.88.99.1", "6to4 relay"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "unique-local"),
    ("fd12::1", "unique-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("100::1", "discard"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("2001:2::1", "IETF"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("64:ff9b:1::a00:1", "local-use NAT64"),
    ("::ffff:127.0.0.1", "IPv4-mapped 127.0.0.1: loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped 10.0.0.1: private"),
    ("::ffff:169.254.169.254", "IPv4-mapped 169.254.169.254: link-local"),
    ("::7f00:1", "IPv4-compatible 127.0.0.1: loopback"),
    ("::a00:1", "IPv4-compatible 10.0.0.1: private"),
    ("64:ff9b::a00:1", "NAT64 10.0.0.1: private"),
    ("64:ff9b::7f00:1", "NAT64 127.0.0.1: loopback"),
    ("2002:a00:1::", "6to4 10.0.0.1: private"),
    ("2002:a9fe:a9fe::1", "6to4 169.254.169.254: link-local"),
    ("::ffff:0:a00:1", "global unicast"),  # IPv4-translated (SIIT): outside 2000::/3
    ("5f00::1", "global unicast"),  # SRv6 SIDs
]

ALLOWED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "2002:0808:0808::",  # 6to4 of 8.8.8.8
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    # neighbours of blocked ranges: a wrong prefix length shows up here
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "169.253.255.255",
    "169.255.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2000::1",
    "3ffe:ffff::1",
    "2001:200::1",
    "2001:db9::1",
    "2003::1",
]


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_blocked_addresses(address: str, reason: str) -> None:
    got = check_address(ip(address), NO_ALLOW)
    assert got is not None, f"{address} should be blocked"
    assert reason in got


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert check_address(ip(address), NO_ALLOW) is None


def test_no_address_the_stdlib_calls_non_global_is_allowed() -> None:
    """Cross-check against ``ipaddress``: we may block more than it does, never less."""
    for top in range(1 << 16):  # one address in every /16
        v4 = ipaddress.IPv4Address(top << 16 | 1)
        if not v4.is_global or v4.is_multicast:
            assert check_address(v4, NO_ALLOW) is not None, v4
    for v6 in ("::1", "::", "fe80::1", "fc00::1", "2001:db8::1", "2001:10::1", "100::1"):
        assert not ip(v6).is_global
        assert check_address(ip(v6), NO_ALLOW) is not None, v6


def test_allowlist_opens_only_its_networks() -> None:
    allow = parse_networks("127.0.0.0/8")
    assert check_address(ip("127.0.0.1"), allow) is None
    assert check_address(ip("127.9.9.9"), allow) is None
    assert check_address(ip("10.0.0.1"), allow) == "private network"
    assert check_address(ip("::1"), allow) == "loopback"  # families never mix
    assert check_address(ip("::ffff:127.0.0.1"), allow) is None  # unwrapped form is allowed
    assert check_address(ip("::ffff:10.0.0.1"), allow) is not None


def test_allowlist_for_ipv6_and_private_ranges() -> None:
    allow = parse_networks("10.1.0.0/16, ::1/128, fd00::/8")
    assert check_address(ip("10.1.2.3"), allow) is None
    assert check_address(ip("10.2.0.1"), allow) == "private network"
    assert check_address(ip("::1"), allow) is None
    assert check_address(ip("fd12::1"), allow) is None
    assert check_address(ip("fc00::1"), allow) == "unique-local"
    assert check_address(ip("127.0.0.1"), allow) == "loopback"


def test_parse_networks() -> None:
    assert parse_networks("") == ()
    assert parse_networks("  \t ") == ()
    assert parse_networks("127.0.0.0/8,10.1.0.0/16,::1/128") == (
        ipaddress.IPv4Network("127.0.0.0/8"),
        ipaddress.IPv4Network("10.1.0.0/16"),
        ipaddress.IPv6Network("::1/128"),
    )
    assert parse_networks(" 192.168.5.5 , ") == (ipaddress.IPv4Network("192.168.5.5/32"),)


@pytest.mark.parametrize(
    "text", ["nonsense", "10.0.0.1/8", "10.0.0.0/33", "127.0.0.0/8;10.0.0.0/8", "::1/129", "*"]
)
def test_parse_networks_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="OUTBOX_ALLOW_NETWORKS") as info:
        parse_networks(f"127.0.0.0/8,{text}")
    assert repr(text) in str(info.value)


def test_blocked_address_message() -> None:
    exc = BlockedAddress("example.com", ip("10.0.0.5"), "private network")
    assert isinstance(exc, OutboxError)
    assert str(exc) == (
        "example.com resolves to 10.0.0.5 (private network); set OUTBOX_ALLOW_NETWORKS to allow it"
    )
    literal = BlockedAddress("10.0.0.5", ip("10.0.0.5"), "private network")
    assert str(literal).startswith("10.0.0.5 is blocked (private network)")


class Stub:
    """A resolver returning fixed answers and recording its calls."""

    def __init__(self, *answers: str, error: OSError | None = None) -> None:
        self.answers = [ip(a) for a in answers]
        self.error = error
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append((host, port))
        if self.error is not None:
            raise self.error
        return list(self.answers)


def test_resolve_literal_skips_the_resolver() -> None:
    stub = Stub("8.8.8.8")
    assert asyncio.run(resolve("10.0.0.1", 80, resolver=stub)) == [ip("10.0.0.1")]
    assert asyncio.run(resolve("[::1]", 80, resolver=stub)) == [ip("::1")]
    assert stub.calls == []
    assert asyncio.run(resolve("hooks.example", 81, resolver=stub)) == [ip("8.8.8.8")]
    assert stub.calls == [("hooks.example", 81)]


def test_resolve_deduplicates_in_order() -> None:
    stub = Stub("1.1.1.1", "8.8.8.8", "1.1.1.1")
    assert asyncio.run(resolve("h.example", 80, resolver=stub)) == [ip("1.1.1.1"), ip("8.8.8.8")]


@pytest.mark.parametrize(
    "stub", [Stub(error=socket.gaierror(-2, "Name or service not known")), Stub()]
)
def test_resolution_failure(stub: Stub) -> None:
    with pytest.raises(ResolutionFailed, match=r"cannot resolve nx\.example") as info:
        asyncio.run(resolve("nx.example", 80, resolver=stub))
    assert isinstance(info.value, OutboxError)
    assert not isinstance(info.value, BlockedAddress)


def test_check_url_sync_parses_host_and_port() -> None:
    calls: list[tuple[str, int]] = []

    def public(host: str, port: int) -> list[IPAddress]:
        calls.append((host, port))
        return [ip("8.8.8.8")]

    check_url_sync("https://Bücher.example/hook", NO_ALLOW, resolver=public)
    check_url_sync("http://hooks.example:8080/x", NO_ALLOW, resolver=public)
    assert calls == [("xn--bcher-kva.example", 443), ("hooks.example", 8080)]
    with pytest.raises(BlockedAddress, match=r"^169\.254\.169\.254 is blocked"):
        check_url_sync("http://169.254.169.254/latest/meta-data", NO_ALLOW, resolver=public)
    with pytest.raises(BlockedAddress, match=r"IPv4-mapped 127\.0\.0\.1"):
        check_url_sync("http://[::ffff:127.0.0.1]:8080/", NO_ALLOW, resolver=public)
    assert len(calls) == 2  # literals are never looked up


@pytest.mark.parametrize("url", ["ftp://hooks.example/", "http:///path", "not a url", ""])
def test_check_url_sync_rejects_non_http_urls(url: str) -> None:
    def never(host: str, port: int) -> list[IPAddress]:
        raise AssertionError("no lookup for an invalid URL")

    with pytest.raises(InvalidEndpoint):
        check_url_sync(url, NO_ALLOW, resolver=never)


def test_blocked_reason_walks_the_chain() -> None:
    blocked = BlockedAddress("h.example", ip("10.0.0.1"), "private network")
    try:
        try:
            raise blocked
        except BlockedAddress as exc:
            raise httpx.ConnectError("wrapped") from exc
    except httpx.ConnectError as outer:
        assert blocked_reason(outer) == str(blocked)
    assert blocked_reason(blocked) == str(blocked)
    loop = ValueError("a")
    loop.__context__ = KeyError("b")
    loop.__context__.__context__ = loop
    assert blocked_reason(loop) is None


# --- the delivery guard refuses names RFC 6761 reserves for loopback, by name ----------------

@pytest.mark.parametrize("host", ["localhost", "localhost.", "LOCALHOST.", "api.localhost",
                                  "api.localhost.", "a.b.LocalHost."])
@pytest.mark.parametrize("allow", ["", "10.0.0.0/8", "127.0.0.2/32"])
def test_guarded_resolver_refuses_loopback_names_without_a_lookup(host: str, allow: str) -> None:
    stub = Stub("93.184.216.34")  # whatever a resolver would answer is never asked
    guard = GuardedResolver(parse_networks(allow), resolver=stub)
    with pytest.raises(BlockedAddress, match=r"\(loopback name, RFC 6761\)") as info:
        asyncio.run(guard.resolve(host, 80))
    assert info.value.host == host and info.value.address == ip("127.0.0.1")
    assert stub.calls == []


@pytest.mark.parametrize(("allow", "answer"), [("127.0.0.0/8", "127.0.0.1"), ("::1", "::1")])
def test_guarded_resolver_resolves_loopback_names_when_loopback_is_allowed(
    allow: str, answer: str
) -> None:
    stub = Stub(answer)
    guard = GuardedResolver(parse_networks(allow), resolver=stub)
    got = asyncio.run(guard.resolve("api.localhost", 80))
    assert [r["host"] for r in got] == [answer]
    assert stub.calls == [("api.localhost", 80)]
    unresolvable = GuardedResolver(parse_networks(allow), resolver=Stub())
    with pytest.raises(ResolutionFailed):
        asyncio.run(unresolvable.resolve("LOCALHOST.", 80))


@pytest.mark.parametrize("host", ["localhost.example.com", "mylocalhost", "localhost-foo.com"])
def test_guarded_resolver_near_misses_are_looked_up(host: str) -> None:
    stub = Stub("93.184.216.34")
    got = asyncio.run(GuardedResolver(resolver=stub).resolve(host, 443))
    assert [r["host"] for r in got] == ["93.184.216.34"]
    assert stub.calls == [(host, 443)]
