"""The blocking registration-time SSRF check (check_url_sync) with stub resolvers."""

from __future__ import annotations

import ipaddress
import socket
import threading

import pytest

from outbox._security.ssrf import (
    BlockedAddress,
    IPAddress,
    ResolutionFailed,
    SyncResolver,
    check_name,
    check_url_sync,
    is_loopback_name,
    parse_networks,
)
from outbox.admin.endpoints import check_destination
from outbox.errors import InvalidEndpoint

ip = ipaddress.ip_address


def answering(*addresses: str) -> SyncResolver:
    def resolver(host: str, port: int) -> list[IPAddress]:
        return [ip(a) for a in addresses]
    return resolver


def test_public_host_passes_and_returns_first_address() -> None:
    got = check_url_sync("https://hooks.example/x", (), resolver=answering("93.184.216.34"))
    assert got == ip("93.184.216.34")


@pytest.mark.parametrize(("addresses", "bad", "reason"), [
    (("127.0.0.1",), "127.0.0.1", "loopback"),
    (("93.184.216.34", "10.0.0.7"), "10.0.0.7", "private network"),
    (("::ffff:169.254.169.254",), "::ffff:a9fe:a9fe", "IPv4-mapped"),
])
def test_any_blocked_address_refuses(addresses: tuple[str, ...], bad: str, reason: str) -> None:
    with pytest.raises(BlockedAddress) as info:
        check_url_sync("https://hooks.example/x", (), resolver=answering(*addresses))
    assert str(info.value.address) == bad
    assert reason in str(info.value)


def test_allowlist_lets_private_networks_through() -> None:
    allow = parse_networks("127.0.0.0/8, 10.0.0.0/8")
    assert check_url_sync("http://localhost:8080/", allow,
                          resolver=answering("127.0.0.1", "10.1.2.3")) == ip("127.0.0.1")


def test_ip_literals_are_checked_without_a_lookup() -> None:
    def never(host: str, port: int) -> list[IPAddress]:
        raise AssertionError("no lookup for a literal")
    with pytest.raises(BlockedAddress, match="loopback"):
        check_url_sync("http://[::1]:9/", (), resolver=never)
    assert check_url_sync("http://8.8.8.8/", (), resolver=never) == ip("8.8.8.8")


def test_resolution_failures() -> None:
    def fails(host: str, port: int) -> list[IPAddress]:
        raise socket.gaierror(-2, "Name or service not known")
    with pytest.raises(ResolutionFailed, match="Name or service not known"):
        check_url_sync("https://nowhere.invalid/", (), resolver=fails)
    with pytest.raises(ResolutionFailed, match="no addresses"):
        check_url_sync("https://nowhere.invalid/", (), resolver=answering())


def test_a_hanging_resolver_times_out() -> None:
    release = threading.Event()

    def hangs(host: str, port: int) -> list[IPAddress]:
        release.wait(10)
        return []
    try:
        with pytest.raises(ResolutionFailed, match=r"no answer within 0\.2s"):
            check_url_sync("https://slow.example/", (), resolver=hangs, timeout=0.2)
    finally:
        release.set()


def test_bad_urls_are_invalid_endpoints() -> None:
    with pytest.raises(InvalidEndpoint):
        check_url_sync("ftp://x/", ())


def test_registration_message_and_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidEndpoint) as info:
        check_destination("http://127.0.0.1:8080/hooks", ())
    assert str(info.value) == ("endpoint URL http://127.0.0.1:8080/hooks resolves to 127.0.0.1"
                               " (loopback); set OUTBOX_ALLOW_NETWORKS to allow it")
    assert check_destination("http://127.0.0.1:8080/hooks", parse_networks("127.0.0.0/8")) == ()

    def fails(host: str, port: int, **_: object) -> list[object]:
        raise socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", fails)
    (warning,) = check_destination("https://offline.example/h", ())
    assert "cannot resolve offline.example" in warning and "registered anyway" in warning


# --- names RFC 6761 reserves for loopback: refused by name, before any lookup ------------

LOOPBACK_NAMES = [
    "localhost", "localhost.", "LOCALHOST", "LOCALHOST.", "LocalHost", "api.localhost",
    "api.localhost.", "API.LOCALHOST", "a.b.c.localhost", "x.LocalHost.",
    "\uff2c\uff2f\uff23\uff21\uff2c\uff28\uff2f\uff33\uff34",  # full-width, IDNA: "localhost"
]
NEAR_MISSES = [
    "localhost.example.com", "mylocalhost", "localhost-foo.com", "localhostx",
    "xlocalhost.", "localhost.com", "api.localhost.example", "local-host", "localhost4",
]


def never(host: str, port: int) -> list[IPAddress]:
    raise AssertionError(f"no lookup for a loopback name ({host})")


@pytest.mark.parametrize("name", LOOPBACK_NAMES)
def test_loopback_names_are_refused_without_a_lookup(name: str) -> None:
    ascii_name = name.encode("idna").decode("ascii")
    assert is_loopback_name(ascii_name)
    with pytest.raises(BlockedAddress) as info:
        check_url_sync(f"http://{name}:8080/hooks", (), resolver=never)
    assert info.value.address == ip("127.0.0.1")
    assert info.value.reason == "loopback name, RFC 6761"
    with pytest.raises(BlockedAddress):
        check_name(ascii_name, ())


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_near_misses_are_ordinary_names(name: str) -> None:
    assert not is_loopback_name(name)
    check_name(name, ())
    got = check_url_sync(f"https://{name}/x", (), resolver=answering("93.184.216.34"))
    assert got == ip("93.184.216.34")


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST.", "api.localhost"])
@pytest.mark.parametrize(("allow", "answer"), [
    ("127.0.0.0/8", "127.0.0.1"), ("127.0.0.1", "127.0.0.1"), ("::1", "::1"),
    ("10.0.0.0/8, ::1/128", "::1"),
])
def test_allowed_loopback_lets_loopback_names_be_looked_up(name: str, allow: str,
                                                           answer: str) -> None:
    calls: list[str] = []

    def loopback(host: str, port: int) -> list[IPAddress]:
        calls.append(host)
        return [ip(answer)]

    check_name(name, parse_networks(allow))
    assert check_url_sync(f"http://{name}/x", parse_networks(allow),
                          resolver=loopback) == ip(answer)
    assert calls == [name.lower()]  # looked up, then checked address by address as before


@pytest.mark.parametrize("allow", ["", "10.0.0.0/8", "127.0.0.2/32", "fd00::/8",
                                   "::ffff:127.0.0.1/128"])
def test_an_allowlist_without_loopback_still_refuses_loopback_names(allow: str) -> None:
    with pytest.raises(BlockedAddress, match="loopback name"):
        check_url_sync("http://api.localhost/x", parse_networks(allow), resolver=never)


def test_an_allowed_name_still_has_its_addresses_checked() -> None:
    with pytest.raises(BlockedAddress) as info:
        check_url_sync("http://localhost/x", parse_networks("127.0.0.0/8"),
                       resolver=answering("127.0.0.1", "::1"))
    assert info.value.address == ip("::1")


def test_loopback_name_registration_message() -> None:
    for url in ("http://api.localhost/x", "http://LOCALHOST./x"):
        with pytest.raises(InvalidEndpoint) as info:
            check_destination(url, ())
        assert str(info.value) == (
            f"endpoint URL {url} resolves to 127.0.0.1 (loopback name, RFC 6761); "
            "set OUTBOX_ALLOW_NETWORKS to allow it")
