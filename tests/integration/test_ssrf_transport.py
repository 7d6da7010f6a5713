"""SSRF guard over real sockets on 127.0.0.1: pinning, rebinding, proxies, TLS hostname.

Names are answered by stub resolvers; the real network backend is wrapped so every TCP
connect is recorded (and anything but 127.0.0.1 is refused, so a broken guard fails fast
instead of reaching out).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import httpcore
import httpx
import pytest

from outbox.delivery.pinning import GuardedTransport
from outbox.ssrf import (
    BlockedAddress,
    IPAddress,
    IPNetwork,
    ResolutionFailed,
    blocked_reason,
    check_url,
    parse_networks,
    resolve,
)

LOOPBACK = parse_networks("127.0.0.0/8")
NO_ALLOW: tuple[IPNetwork, ...] = ()
TIMEOUT = httpx.Timeout(5.0, connect=2.0)


@dataclasses.dataclass(frozen=True)
class Seen:
    host: str | None
    path: str
    peer: tuple[str, int]


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[Seen]
    sni: list[str | None]


class EchoHandler(BaseHTTPRequestHandler):
    """Answers every GET with the Host header it received (HTTP/1.1, keep-alive)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        server = cast(EchoServer, self.server)
        host = self.headers.get("Host")
        server.seen.append(Seen(host, self.path, self.client_address))
        body = (host or "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _serve(tls: ssl.SSLContext | None = None) -> Iterator[EchoServer]:
    server = EchoServer(("127.0.0.1", 0), EchoHandler)
    server.seen, server.sni = [], []
    if tls is not None:
        tls.sni_callback = lambda _sock, name, _ctx: server.sni.append(name)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def server() -> Iterator[EchoServer]:
    with _serve() as echo:
        yield echo


class Stub:
    """Resolver answering from a script: the n-th call gets ``answers[n]`` (last repeats)."""

    def __init__(self, host: str, *answers: list[str]) -> None:
        self.host = host
        self.answers = [[ipaddress.ip_address(a) for a in answer] for answer in answers]
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append((host, port))
        if host != self.host:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """The real backend, recording every connect; only 127.0.0.1 is actually dialled."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        if host != "127.0.0.1":
            raise httpcore.ConnectError(f"test refuses to dial {host}")
        return await self._real.connect_tcp(host, port, timeout=timeout)

    async def sleep(self, seconds: float) -> None:
        await self._real.sleep(seconds)


def _client(transport: GuardedTransport, *, trust_env: bool = False) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, trust_env=trust_env, timeout=TIMEOUT)


async def _get(transport: GuardedTransport, url: str, times: int = 1) -> list[httpx.Response]:
    async with _client(transport) as client:
        return [await client.get(url) for _ in range(times)]


def test_name_resolving_to_private_address_is_refused_without_connecting(
    server: EchoServer,
) -> None:
    port = server.server_address[1]
    stub, backend = Stub("public.example", ["10.0.0.1"]), RecordingBackend()
    transport = GuardedTransport(NO_ALLOW, resolver=stub, backend=backend)
    with pytest.raises(BlockedAddress) as info:
        asyncio.run(_get(transport, f"http://public.example:{port}/"))
    assert type(info.value) is BlockedAddress  # httpx did not wrap it
    assert info.value.address == ipaddress.ip_address("10.0.0.1")
    assert str(info.value).startswith("public.example resolves to 10.0.0.1 (private network)")
    assert blocked_reason(info.value) == str(info.value)
    assert stub.calls == [("public.example", port)]
    assert backend.connects == []
    assert server.seen == []


def test_allowed_name_reaches_checked_address_with_original_host_header(
    server: EchoServer,
) -> None:
    port = server.server_address[1]
    stub, backend = Stub("hooks.example", ["127.0.0.1"]), RecordingBackend()
    transport = GuardedTransport(LOOPBACK, resolver=stub, backend=backend)
    [response] = asyncio.run(_get(transport, f"http://hooks.example:{port}/hook?x=1"))
    assert response.status_code == 200
    assert response.text == f"hooks.example:{port}"
    assert [(s.host, s.path) for s in server.seen] == [(f"hooks.example:{port}", "/hook?x=1")]
    assert backend.connects == [("127.0.0.1", port)]


def test_rebinding_keepalive_connection_is_resolved_once(server: EchoServer) -> None:
    port = server.server_address[1]
    stub = Stub("hooks.example", ["127.0.0.1"], ["10.0.0.1"])
    backend = RecordingBackend()
    transport = GuardedTransport(LOOPBACK, resolver=stub, backend=backend)
    responses = asyncio.run(_get(transport, f"http://hooks.example:{port}/", times=3))
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert len(stub.calls) == 1  # one lookup for the one connection
    assert backend.connects == [("127.0.0.1", port)]
    assert len({s.peer for s in server.seen}) == 1  # all three on the same connection


def test_rebinding_new_connection_is_checked_again_and_refused(server: EchoServer) -> None:
    port = server.server_address[1]
    stub = Stub("hooks.example", ["127.0.0.1"], ["10.0.0.1"])
    backend = RecordingBackend()
    no_keepalive = httpx.Limits(max_keepalive_connections=0)
    transport = GuardedTransport(LOOPBACK, resolver=stub, backend=backend, limits=no_keepalive)

    async def two_connections() -> tuple[httpx.Response, BaseException | None]:
        async with _client(transport) as client:
            first = await client.get(f"http://hooks.example:{port}/")
            try:
                await client.get(f"http://hooks.example:{port}/")
            except BlockedAddress as exc:
                return first, exc
            return first, None

    first, second = asyncio.run(two_connections())
    assert first.status_code == 200
    assert isinstance(second, BlockedAddress)
    assert second.address == ipaddress.ip_address("10.0.0.1")
    assert len(stub.calls) == 2
    assert backend.connects == [("127.0.0.1", port)]  # never dialled the unchecked answer
    assert len(server.seen) == 1


@pytest.mark.parametrize("allow", [NO_ALLOW, LOOPBACK])
def test_loopback_literal_needs_the_allowlist(server: EchoServer, allow: tuple[IPNetwork]) -> None:
    port = server.server_address[1]
    stub, backend = Stub("unused.example", ["8.8.8.8"]), RecordingBackend()
    transport = GuardedTransport(allow, resolver=stub, backend=backend)
    url = f"http://127.0.0.1:{port}/"
    if not allow:
        with pytest.raises(BlockedAddress, match=r"^127\.0\.0\.1 is blocked \(loopback\)"):
            asyncio.run(_get(transport, url))
        assert backend.connects == []
        assert server.seen == []
    else:
        [response] = asyncio.run(_get(transport, url))
        assert response.text == f"127.0.0.1:{port}"
        assert backend.connects == [("127.0.0.1", port)]
    assert stub.calls == []  # a literal is never looked up


@pytest.mark.parametrize(
    ("answers", "blocked"),
    [
        (["8.8.8.8", "10.0.0.1"], "10.0.0.1"),
        (["10.0.0.1", "127.0.0.1"], "10.0.0.1"),
        (["127.0.0.1", "169.254.169.254"], "169.254.169.254"),
        (["127.0.0.1", "::ffff:192.168.0.1"], "::ffff:192.168.0.1"),
    ],
)
def test_any_bad_answer_refuses_the_host(
    server: EchoServer, answers: list[str], blocked: str
) -> None:
    port = server.server_address[1]
    stub, backend = Stub("multi.example", answers), RecordingBackend()
    transport = GuardedTransport(LOOPBACK, resolver=stub, backend=backend)
    with pytest.raises(BlockedAddress) as info:
        asyncio.run(_get(transport, f"http://multi.example:{port}/"))
    assert info.value.address == ipaddress.ip_address(blocked)
    assert backend.connects == []
    assert server.seen == []


def test_resolution_failure_and_timeout_are_resolution_failed(server: EchoServer) -> None:
    port = server.server_address[1]
    backend = RecordingBackend()
    transport = GuardedTransport(LOOPBACK, resolver=Stub("other.example"), backend=backend)
    with pytest.raises(ResolutionFailed, match=r"cannot resolve nx\.example"):
        asyncio.run(_get(transport, f"http://nx.example:{port}/"))

    async def hang(host: str, port: int) -> list[IPAddress]:
        await asyncio.sleep(30)
        return [ipaddress.ip_address("127.0.0.1")]

    slow = GuardedTransport(LOOPBACK, resolver=hang, backend=backend)

    async def get_with_short_connect_timeout() -> None:
        async with httpx.AsyncClient(transport=slow, trust_env=False) as client:
            await client.get(f"http://slow.example:{port}/", timeout=httpx.Timeout(5, connect=0.2))

    with pytest.raises(ResolutionFailed, match="timed out"):
        asyncio.run(asyncio.wait_for(get_with_short_connect_timeout(), 5))
    assert backend.connects == []


@pytest.fixture
def dead_proxy() -> Iterator[str]:
    """A bound, never-listening port: anything sent through it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("trust_env", [False, True])
def test_environment_proxies_are_not_used(
    server: EchoServer, dead_proxy: str, monkeypatch: pytest.MonkeyPatch, trust_env: bool
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
        monkeypatch.setenv(name.lower(), dead_proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    port = server.server_address[1]
    url = f"http://hooks.example:{port}/direct"

    async def plain() -> None:  # control: the environment really does name a proxy
        async with httpx.AsyncClient(trust_env=True, timeout=TIMEOUT) as client:
            await client.get(f"http://127.0.0.1:{port}/via-proxy")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(plain())
    assert server.seen == []

    transport = GuardedTransport(LOOPBACK, resolver=Stub("hooks.example", ["127.0.0.1"]))

    async def guarded() -> httpx.Response:
        async with _client(transport, trust_env=trust_env) as client:
            return await client.get(url)

    assert asyncio.run(guarded()).status_code == 200
    assert [(s.host, s.path) for s in server.seen] == [(f"hooks.example:{port}", "/direct")]


def _certificate(tmp: Path, name: str) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.parametrize("cert_name", ["hooks.example", "other.example"])
def test_tls_uses_the_hostname_for_sni_and_verification(tmp_path: Path, cert_name: str) -> None:
    cert, key = _certificate(tmp_path, cert_name)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    with _serve(server_ctx) as srv:
        port = srv.server_address[1]
        stub, backend = Stub("hooks.example", ["127.0.0.1"]), RecordingBackend()
        transport = GuardedTransport(LOOPBACK, resolver=stub, backend=backend, verify=client_ctx)
        url = f"https://hooks.example:{port}/"
        if cert_name == "hooks.example":
            [response] = asyncio.run(_get(transport, url))
            assert response.text == f"hooks.example:{port}"
        else:  # certificate checked against the URL's name, not against 127.0.0.1
            with pytest.raises(httpx.ConnectError, match=r"(?i)hostname mismatch"):
                asyncio.run(_get(transport, url))
        assert backend.connects == [("127.0.0.1", port)]
        assert srv.sni == ["hooks.example"]


def test_system_resolver_is_checked() -> None:
    """Real ``getaddrinfo`` (hosts file / numeric forms only, no DNS traffic)."""
    addresses = asyncio.run(resolve("localhost", 80))
    assert addresses
    assert all(a.is_loopback for a in addresses)
    with pytest.raises(BlockedAddress, match=r"^localhost resolves to .* \(loopback\)"):
        asyncio.run(check_url("http://localhost:8080/", NO_ALLOW))
    for sneaky in ("127.1", "2130706433", "0x7f.1"):  # inet_aton forms httpx passes through
        with pytest.raises(BlockedAddress) as info:
            asyncio.run(check_url(f"http://{sneaky}/", NO_ALLOW))
        assert info.value.address == ipaddress.ip_address("127.0.0.1")
    asyncio.run(check_url("http://localhost/", parse_networks("127.0.0.0/8,::1/128")))
