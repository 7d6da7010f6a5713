"""The SSRF guard on the path the worker really uses, over real sockets on 127.0.0.x.

Every request goes through ``send`` over ``make_worker_transport(settings)``, the transport
``outbox worker`` builds (``make_transport`` with a ``GuardedResolver``); host names are
answered by a scripted resolver (the ``dns`` fixture, see :mod:`tests.support.guarded_http`),
except in the tests of the real system resolver (getaddrinfo), which patch nothing.
Redirects, proxies and timeouts on the same path: ``test_transport_hardening.py``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from outbox._security import ssrf
from outbox.delivery.outcome import AttemptResult, Verdict
from tests.support.guarded_http import (
    HOST,
    INTERNAL,
    PUBLIC,
    Server,
    Stub,
    assert_refused,
    post,
    reply,
    serving,
    twins,
    worker_transport,
)

# -- pinning and rebinding ------------------------------------------------------------------


def test_connection_goes_to_the_checked_address_with_the_url_host(dns: Stub) -> None:
    dns.script(HOST, [PUBLIC], [INTERNAL])  # a second lookup would land on 127.0.0.2

    async def go() -> tuple[AttemptResult, Server, Server]:
        async with twins() as (public, internal), worker_transport() as transport:
            return await post(transport, public.url("/in?x=1")), public, internal

    result, public, internal = asyncio.run(go())
    assert (result.verdict, result.status_code) == (Verdict.DELIVERED, 200), result
    assert [(s.path, s.host) for s in public.requests] == [("/in?x=1", f"{HOST}:{public.port}")]
    assert internal.connections == []
    assert dns.calls == [(HOST, public.port)]  # one lookup; the socket layer made none


def test_rebinding_cannot_move_a_kept_alive_connection(dns: Stub) -> None:
    dns.script(HOST, [PUBLIC], [INTERNAL])

    async def go() -> tuple[list[AttemptResult], Server, Server]:
        async with twins() as (public, internal), worker_transport() as transport:
            return [await post(transport, public.url()) for _ in range(3)], public, internal

    results, public, internal = asyncio.run(go())
    assert [r.verdict for r in results] == [Verdict.DELIVERED] * 3
    assert len(public.connections) == 1 and len(public.requests) == 3
    assert internal.connections == []
    assert len(dns.calls) == 1


def test_rebinding_on_a_new_connection_is_refused(dns: Stub) -> None:
    dns.script(HOST, [PUBLIC], [INTERNAL])

    async def go() -> tuple[list[AttemptResult], Server, Server]:
        async with twins(reply(close=True)) as (public, internal), \
                worker_transport() as transport:  # every request on a new connection
            return [await post(transport, public.url()) for _ in range(2)], public, internal

    (first, second), public, internal = asyncio.run(go())
    assert first.verdict is Verdict.DELIVERED, first
    assert_refused(second, INTERNAL)
    assert "loopback" in (second.error or "")
    assert len(dns.calls) == 2  # no DNS cache: the new connection looked again
    assert len(public.requests) == 1
    assert internal.connections == []


@pytest.mark.parametrize(
    ("answers", "refused"),
    [
        ([PUBLIC, INTERNAL], INTERNAL),
        ([INTERNAL, PUBLIC], INTERNAL),
        ([PUBLIC, "::ffff:127.0.0.2"], "::ffff:7f00:2"),
        ([PUBLIC, "10.0.0.1"], "10.0.0.1"),
        ([PUBLIC, "169.254.169.254"], "169.254.169.254"),
    ],
)
def test_a_host_with_any_blocked_answer_is_refused(
    dns: Stub, answers: list[str], refused: str
) -> None:
    dns.script(HOST, answers)

    async def go() -> tuple[AttemptResult, Server, Server]:
        async with twins() as (public, internal), worker_transport() as transport:
            return await post(transport, public.url()), public, internal

    result, public, internal = asyncio.run(go())
    assert_refused(result, refused)
    assert public.connections == [] and internal.connections == []


# -- IP literals ------------------------------------------------------------------------------


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),  # IPv4-mapped
        ("[::ffff:7f00:1]", "::ffff:7f00:1"),
        ("[::127.0.0.1]", "::7f00:1"),  # IPv4-compatible
        ("127.1", "127.0.0.1"),  # numeric forms the socket layer maps onto 127.0.0.1
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),  # not numeric to aiohttp: a name, looked up, refused
    ],
)
def test_loopback_literals_are_refused_without_connecting(
    dns: Stub, host: str, refused: str
) -> None:
    dns.script("0x7f.1", [PUBLIC])  # what getaddrinfo answers for it

    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC)), worker_transport(allow="") as transport:
            return await post(transport, server.url(host=host)), server

    result, server = asyncio.run(go())
    assert_refused(result, refused)
    assert server.connections == []
    assert dns.calls == ([("0x7f.1", server.port)] if host == "0x7f.1" else [])


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_loopback_literal_is_refused_without_connecting(dns: Stub) -> None:
    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server("::1")), \
                worker_transport(allow="127.0.0.0/8") as transport:
            return await post(transport, server.url(host="[::1]")), server

    result, server = asyncio.run(go())
    assert_refused(result, "::1")
    assert server.connections == []
    assert dns.calls == []


@pytest.mark.parametrize("url", ["http://10.0.0.1/", "http://169.254.169.254/latest/meta-data",
                                 "http://[fd00::1]/", "http://[fe80::1]:8080/",
                                 "http://[::ffff:10.0.0.1]/", "http://[64:ff9b::a00:1]/"])
def test_private_literals_are_refused_without_connecting(dns: Stub, url: str) -> None:
    async def go() -> AttemptResult:
        async with worker_transport(connect_timeout=1.0) as transport:
            return await post(transport, url, timeout=httpx.Timeout(5.0, connect=1.0))

    result = asyncio.run(go())
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf"), result
    assert dns.calls == []



@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "api.localhost", "Api.LocalHost."])
def test_loopback_names_are_refused_by_name_without_a_lookup(dns: Stub, host: str) -> None:
    """RFC 6761 loopback names: refused whatever the resolver would answer (here: an
    address the allowlist would let through), and never looked up."""
    dns.script(host.lower().rstrip("."), [PUBLIC])

    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC)), \
                worker_transport(allow="10.0.0.0/8") as transport:
            return await post(transport, server.url(host=host)), server

    result, server = asyncio.run(go())
    assert_refused(result, "127.0.0.1")
    assert "loopback name, RFC 6761" in (result.error or "")
    assert server.connections == [] and dns.calls == []


def test_loopback_names_are_delivered_when_loopback_is_allowed(dns: Stub) -> None:
    dns.script("api.localhost", [PUBLIC])

    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC)), worker_transport() as transport:
            return await post(transport, server.url(host="api.localhost")), server

    result, server = asyncio.run(go())
    assert result.verdict == Verdict.DELIVERED, result
    assert len(server.connections) == 1


# -- the real system resolver (getaddrinfo), no stub ----------------------------------------


def _lookup(name: str) -> list[ssrf.IPAddress]:
    """What getaddrinfo answers for ``name`` on this machine (nothing if it fails)."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    found = (ipaddress.ip_address(info[4][0]) for info in infos
             if info[0] in (socket.AF_INET, socket.AF_INET6))
    return list(dict.fromkeys(found))


# This machine's host name: not a loopback *name* (RFC 6761), so only a lookup can tell it
# is local. Debian maps it to 127.0.1.1 (or 127.0.0.1) in /etc/hosts, containers to their
# private address; either way it must be refused unless allowed. Collected once.
MACHINE = socket.gethostname()
MACHINE_ADDRESSES = _lookup(MACHINE)
MACHINE_IS_LOCAL = (not ssrf.is_loopback_name(MACHINE) and bool(MACHINE_ADDRESSES) and all(
    ssrf.check_address(ip, ()) is not None for ip in MACHINE_ADDRESSES))
needs_local_machine_name = pytest.mark.skipif(
    not MACHINE_IS_LOCAL,
    reason=f"host name {MACHINE!r} resolves to {MACHINE_ADDRESSES} here, not to "
           "non-public addresses only")


def _single_hosts(addresses: list[ssrf.IPAddress]) -> str:
    return ",".join(f"{ip}/{ip.max_prefixlen}" for ip in addresses)


@needs_local_machine_name
def test_real_lookup_of_the_machine_name_is_refused() -> None:
    """getaddrinfo answers a non-public address for a name the name rule lets through: the
    guard refuses the answer; nothing reaches a server listening on that address."""
    refused = MACHINE_ADDRESSES[0]

    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(str(refused))), \
                worker_transport(allow="") as transport:
            return await post(transport, server.url(host=MACHINE)), server

    result, server = asyncio.run(go())
    assert_refused(result, str(refused))
    assert f"{MACHINE} resolves to {refused} ({ssrf.check_address(refused, ())})" in (
        result.error or ""), result.error  # the lookup's answer, not the name rule
    assert server.connections == []


@needs_local_machine_name
def test_real_lookup_of_the_machine_name_is_delivered_when_allowed() -> None:
    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(str(MACHINE_ADDRESSES[0]))), \
                worker_transport(allow=_single_hosts(MACHINE_ADDRESSES)) as transport:
            return await post(transport, server.url(host=MACHINE)), server

    result, server = asyncio.run(go())
    assert result.verdict is Verdict.DELIVERED, result
    assert [s.host for s in server.requests] == [f"{MACHINE}:{server.port}"]


def test_real_lookup_of_localhost_is_delivered_when_loopback_is_allowed() -> None:
    """The name rule lets ``localhost`` through when loopback is allowed; getaddrinfo then
    answers (127.0.0.1, maybe ::1) and the request reaches the server on 127.0.0.1."""
    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC)), \
                worker_transport(allow="127.0.0.0/8,::1/128") as transport:
            return await post(transport, server.url(host="localhost")), server

    result, server = asyncio.run(go())
    assert result.verdict is Verdict.DELIVERED, result
    assert [s.host for s in server.requests] == [f"localhost:{server.port}"]


def test_real_lookup_of_a_numeric_name_is_refused() -> None:
    """``0x7f.1`` is no IP literal to aiohttp or ipaddress, so it goes to getaddrinfo,
    whose inet_aton reading is 127.0.0.1: refused, nothing reaches 127.0.0.1."""
    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC)), worker_transport(allow="") as transport:
            return await post(transport, server.url(host="0x7f.1")), server

    result, server = asyncio.run(go())
    assert_refused(result, "127.0.0.1")
    assert "0x7f.1 resolves to 127.0.0.1 (loopback)" in (result.error or ""), result.error
    assert server.connections == []


# -- TLS to the pinned address, checked against the URL's host name -----------------------------


def _write_certificates(directory: Path) -> None:
    """A CA (ca.pem) and two server certificates it signs: hooks.example.test, other.test."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)

    def named(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def builder(subject: str, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(named(subject))
                .issuer_name(named("outbox test CA")).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - timedelta(minutes=5))
                .not_valid_after(now + timedelta(days=1)))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (builder("outbox test CA", ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name in (HOST, "other.test"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (builder(name, key.public_key())
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                               critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                    critical=False)
                .sign(ca_key, hashes.SHA256()))
        (directory / f"{name}.pem").write_bytes(
            cert.public_bytes(serialization.Encoding.PEM)
            + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()))


def test_tls_goes_to_the_pinned_address_with_the_url_host_name(tmp_path: Path) -> None:
    _write_certificates(tmp_path)
    code = ("import asyncio, json, sys; from tests.support.guarded_http import "
            "tls_scenario; print(json.dumps(asyncio.run(tls_scenario(sys.argv[1]))))")
    env = {**os.environ, "SSL_CERT_FILE": str(tmp_path / "ca.pem")}
    env.pop("SSL_CERT_DIR", None)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, timeout=60,
                          capture_output=True, text=True, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])

    right, wrong = out["right"], out["wrong"]
    # the certificate names hooks.example.test, the socket went to 127.0.0.1: accepted
    assert right["verdict"] == "delivered", right
    assert right["sni"] == [HOST]
    assert right["requests"] == [["/hook", f"{HOST}:{right['port']}"]]
    # same CA, same address, a certificate for another name: refused, nothing sent
    assert (wrong["verdict"], wrong["error_class"]) == ("retry", "tls"), wrong
    assert f"Hostname mismatch, certificate is not valid for '{HOST}'" in wrong["error"], wrong
    assert wrong["sni"] == [HOST]
    assert wrong["requests"] == []
    assert out["lookups"] == 2
