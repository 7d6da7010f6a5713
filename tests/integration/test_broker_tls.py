"""``rediss://``: the worker's send path publishes over TLS to a real redis-server with a
TLS port and checks the server's certificate (a certificate of an untrusted CA is a failed
attempt, nothing published)."""

from __future__ import annotations

import socket
import subprocess
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
            entries = await client.xrange(stream)
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
