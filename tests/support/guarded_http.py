"""Doubles for testing the worker's HTTP transport over real sockets on 127.0.0.x.

:class:`Stub` is a scripted resolver, put in place of ``outbox._security.ssrf.system_resolver`` (the
lookup the SSRF guard falls back to), so DNS answers can change between lookups.
:class:`Server` is a real TCP (optionally TLS) HTTP/1.1 server in the running event loop
that records connections, requests and TLS server names. :func:`worker_transport` is the
transport ``outbox worker`` builds (``make_worker_transport``); :func:`post` sends through
it with ``send``, as the worker does. :func:`tls_scenario` is the TLS check a test runs in a
subprocess that trusts a test CA. The ``dns`` fixture (``tests/integration/conftest.py``)
puts a :class:`Stub` in place.

The stand-in for a public receiver listens on 127.0.0.1, let through by
``OUTBOX_ALLOW_NETWORKS=127.0.0.1/32``; the stand-in for an internal service listens on
127.0.0.2 (loopback, refused). A broken guard shows up as a request reaching 127.0.0.2,
never as traffic leaving the machine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from outbox._security import ssrf
from outbox._security.ssrf import IPAddress
from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.runner import make_worker_transport
from outbox.delivery.sender import Transport, send
from outbox.delivery.settings import WorkerSettings

PUBLIC, INTERNAL = "127.0.0.1", "127.0.0.2"
ALLOW = "127.0.0.1/32"
HOST = "hooks.example.test"
BODY = b'{"type":"order.paid"}'
TIMEOUT = httpx.Timeout(5.0, connect=2.0)
BOUND = 20.0  # seconds: a test whose guard broke fails instead of hanging


class Stub:
    """Answers ``host`` from a script: its n-th lookup gets ``answers[n]`` (last repeats).
    Unknown names fail like NXDOMAIN; names in ``hang`` never answer."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[list[IPAddress]]] = {}
        self.hang: set[str] = set()
        self.calls: list[tuple[str, int]] = []

    def script(self, host: str, *answers: list[str]) -> None:
        self.scripts[host] = [[ipaddress.ip_address(a) for a in answer] for answer in answers]

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append((host, port))
        if host in self.hang:
            await asyncio.sleep(3600)
        script = self.scripts.get(host)
        if not script:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        lookups = sum(1 for name, _ in self.calls if name == host)
        return script[min(lookups, len(script)) - 1]


# -- a recording HTTP/1.1 server ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Seen:
    peer: tuple[str, int]
    path: str
    host: str | None


Answer = Callable[[asyncio.StreamWriter], Awaitable[bool]]  # True: keep the connection


def reply(status: int = 200, headers: Mapping[str, str] | None = None,
          close: bool = False) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        if close:
            extra += "Connection: close\r\n"
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 2\r\n{extra}\r\nok".encode())
        await writer.drain()
        return not close
    return answer


async def hang(writer: asyncio.StreamWriter) -> bool:
    await asyncio.sleep(3600)
    return False


async def trickle(writer: asyncio.StreamWriter) -> bool:
    """A status line, then one header byte every 50 ms, forever."""
    writer.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while True:
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"x")


class Server:
    """Real TCP (optionally TLS) server in the running loop: records every connection, the
    request line and Host header of every request, and the TLS server names asked for."""

    def __init__(self, host: str = PUBLIC, port: int = 0, answer: Answer | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.host, self.port = host, port
        self.answer = answer or reply()
        self.tls = tls
        self.connections: list[tuple[str, int]] = []
        self.requests: list[Seen] = []
        self.sni: list[str | None] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> Server:
        if self.tls is not None:
            self.tls.sni_callback = lambda _sock, name, _ctx: self.sni.append(name)
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def url(self, path: str = "/hook", host: str = HOST, scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")[:2]
        self.connections.append(peer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                fields = {name.strip().lower(): value.strip()
                          for name, _, value in (line.partition(":") for line in lines[1:])}
                await reader.readexactly(int(fields.get("content-length") or 0))
                self.requests.append(Seen(peer, lines[0].split(" ")[1], fields.get("host")))
                if not await self.answer(writer):
                    return
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            writer.close()
            self._tasks.discard(task)


@asynccontextmanager
async def serving(*servers: Server) -> AsyncIterator[None]:
    try:
        for server in servers:
            await server.start()
        yield
    finally:
        for server in servers:
            await server.stop()


@asynccontextmanager
async def twins(answer: Answer | None = None) -> AsyncIterator[tuple[Server, Server]]:
    """A "public" receiver on 127.0.0.1 and an "internal" service on 127.0.0.2, same port."""
    async with serving(public := Server(PUBLIC, answer=answer)):  # noqa: SIM117 (port)
        async with serving(internal := Server(INTERNAL, public.port)):
            yield public, internal


# -- the worker's transport -----------------------------------------------------------------


def worker_transport(allow: str = ALLOW, connect_timeout: float = 2.0
                     ) -> Transport:
    return make_worker_transport(WorkerSettings(allow_networks=allow,
                                                connect_timeout_seconds=connect_timeout))


async def post(transport: Transport, url: str, *,
               timeout: httpx.Timeout = TIMEOUT, total: float = 10.0) -> AttemptResult:
    headers = {"webhook-id": "msg_1", "content-type": "application/json"}
    return await asyncio.wait_for(
        send(transport, url, BODY, headers, timeout=timeout, total_timeout=total), BOUND)


def assert_refused(result: AttemptResult, address: str) -> None:
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf"), result
    assert result.status_code is None
    assert f"{address} " in (result.error or ""), result.error


# -- TLS, in a subprocess that trusts the test CA -------------------------------------------


async def tls_scenario(directory: str) -> dict[str, Any]:
    """POST over https to a server whose certificate names :data:`HOST` ("right") and to one
    whose certificate names ``other.test`` ("wrong"), both on 127.0.0.1 and signed by the CA
    in ``directory`` (``ca.pem``, ``<name>.pem``); what each saw and the lookups made.

    Run in a subprocess whose SSL_CERT_FILE names that CA (the default SSL context, which
    the worker's transport uses, reads it when aiohttp is imported)."""

    def server_context(name: str) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(Path(directory) / f"{name}.pem")
        return context

    stub = Stub()
    stub.script(HOST, [PUBLIC])
    out: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ssrf, "system_resolver", stub)
        right = Server(PUBLIC, tls=server_context(HOST))
        wrong = Server(PUBLIC, tls=server_context("other.test"))
        async with serving(right, wrong), worker_transport() as transport:
            for label, server in (("right", right), ("wrong", wrong)):
                result = await post(transport, server.url(scheme="https"))
                out[label] = {"verdict": result.verdict.value, "error_class": result.error_class,
                              "error": result.error, "sni": server.sni,
                              "requests": [dataclasses.astuple(s)[1:] for s in server.requests],
                              "port": server.port}
    out["lookups"] = len(stub.calls)
    return out
