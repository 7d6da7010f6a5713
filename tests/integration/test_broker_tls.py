"""The TLS schemes through the worker's send path, checking the server's certificate (one
of an untrusted CA is a failed attempt, nothing published): ``rediss://`` to a real
redis-server serving TLS, ``amqps://`` to the real RabbitMQ behind a TLS-terminating
proxy (this machine's RabbitMQ has no TLS listener)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio

from outbox.delivery.outcome import Verdict
from tests.integration.test_broker_transports import job, send
from tests.support import brokers as b
from tests.support.net import free_port
from tests.support.tls import CA


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A second, real redis-server serving TLS only, with a certificate for 127.0.0.1
    issued by a throwaway CA; yields its port and the CA's PEM file."""
    ca = CA()
    server = ca.issue("127.0.0.1", server=True)
    files = {"ca.pem": ca.pem, "server.pem": server.cert, "server.key": server.key}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(tmp_path / "server.pem"),
         "--tls-key-file", str(tmp_path / "server.key"),
         "--tls-ca-cert-file", str(tmp_path / "ca.pem"), "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no redis-server"
                time.sleep(0.1)
        yield port, tmp_path / "ca.pem"
    finally:
        proc.kill()
        proc.wait(10)


def _entries(port: int, ca: Path, stream: str) -> list[b.Got]:
    async def read() -> list[b.Got]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=port, ssl=True,
                                     ssl_ca_certs=str(ca))
        try:
            entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(stream)  # type: ignore[assignment]
        finally:
            await client.aclose()
        return [b.Got(f[b"webhook-id"].decode(), f[b"payload"]) for _, f in entries]

    return list(b.run(read()))


def test_rediss_publishes_over_tls_to_a_trusted_server(
        tls_redis: tuple[int, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    port, ca = tls_redis
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the worker trusts the test CA
    j = job(f"rediss://127.0.0.1:{port}/0?stream=orders")
    (result,) = send(j)
    assert result.verdict is Verdict.DELIVERED, result
    assert _entries(port, ca, "orders") == [b.Got(j.webhook_id, j.payload.encode())]


def test_rediss_refuses_a_server_certificate_it_does_not_trust(
        tls_redis: tuple[int, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port, ca = tls_redis
    other = tmp_path / "other-ca.pem"
    other.write_text(CA("another CA").pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    (result,) = send(job(f"rediss://127.0.0.1:{port}/0?stream=orders"))
    assert (result.verdict, result.error_class) == (Verdict.RETRY, "broker_connect"), result
    assert "certificate verify failed" in (result.error or ""), result
    assert _entries(port, ca, "orders") == []


@pytest.fixture
def tls_amqp(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A TLS listener on 127.0.0.1 (a certificate of a throwaway CA) whose connections are
    piped to the real RabbitMQ on 5672; yields its port and the CA's PEM file."""
    b.require("amqp")
    ca = CA()
    server = ca.issue("127.0.0.1", server=True)
    (tmp_path / "ca.pem").write_text(ca.pem)
    (tmp_path / "server.pem").write_text(server.cert + server.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "server.pem")
    loop = asyncio.new_event_loop()
    started = threading.Event()
    port = free_port()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection("127.0.0.1", 5672)
        await asyncio.gather(pipe(client_r, broker_w), pipe(broker_r, client_w))

    stop = loop.create_future()

    async def serve() -> None:
        listener = await asyncio.start_server(handle, "127.0.0.1", port, ssl=context)
        started.set()
        async with listener:
            await stop

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    assert started.wait(10), "the TLS proxy did not start"
    try:
        yield port, tmp_path / "ca.pem"
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(10)


def test_amqps_publishes_over_tls_and_checks_the_certificate(
        tls_amqp: tuple[int, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port, ca = tls_amqp
    queue = b.unique("q")
    b.run(b.amqp_queue(None, queue))
    url = f"amqps://guest:guest@127.0.0.1:{port}/?routing_key={queue}"
    other = tmp_path / "other-ca.pem"
    other.write_text(CA("another CA").pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    (untrusted,) = send(job(url))
    assert (untrusted.verdict, untrusted.error_class) == (Verdict.RETRY, "broker_connect")
    assert "certificate verify failed" in (untrusted.error or ""), untrusted
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the worker trusts the test CA
    j = job(url)
    (result,) = send(j)
    assert result.verdict is Verdict.DELIVERED, result
    (got,) = b.run(b.amqp_drain(queue))
    assert (got.id, got.body) == (j.webhook_id, j.payload.encode())
