"""Endpoint credentials on the wire, with real receivers on 127.0.0.1: secret headers and
basic/bearer auth arrive with every delivery and ping; mutual TLS against a receiver that
refuses clients without a certificate; no secret value in the worker's log or the
attempt log (even when a receiver echoes the request)."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import ssl
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox._security.secretbox import SecretBox
from outbox.admin import endpoints as ep
from outbox.admin.endpoint_options import CredentialChanges, EndpointCredentials
from outbox.delivery.ping import ping
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.cli import execute
from tests.support.pg import SCHEMA
from tests.support.tls import CA, MutualTLSReceiver
from tests.support.workers import SECRET, add_endpoint, drain, emit, settings

TOKEN = "tok_5d1c0ffee5d1c0ffee"
API_KEY = "key-a1b2c3d4e5f60718"
BASIC = "svc-outbox:pa55-w0rd-wire"


def _update(db_url: str, endpoint: Any, **changes: Any) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.update(c, endpoint, schema=SCHEMA, credentials=CredentialChanges(**changes))


def _attempt_texts(db_url: str) -> str:
    return repr(execute(db_url, f"SELECT * FROM {SCHEMA}.delivery_attempt_log"))


def test_secret_headers_and_bearer_then_basic_arrive_with_each_delivery(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with Receiver(secret=SECRET) as rx:
        eid = add_endpoint(db_url, rx.url + "/hooks", headers={"X-Team": "billing"},
                           credentials=EndpointCredentials(
                               secret_headers={"X-Api-Key": API_KEY}, bearer_token=TOKEN))
        emit(db_url, 2)
        drain(settings(db_url))
        first = rx.wait(2, 5)
        _update(db_url, eid, basic_auth=BASIC, secret_headers={"X-Api-Key": "rotated-key-1"})
        emit(db_url, 1)
        drain(settings(db_url))
        rotated = rx.wait(3, 5)[2]
        _update(db_url, eid, clear_auth=True, clear_secret_headers=True)
        emit(db_url, 1)
        drain(settings(db_url))
        cleared = rx.wait(4, 5)[3]
    for got in first:
        assert got.signature_ok is True
        assert got.headers["authorization"] == f"Bearer {TOKEN}"
        assert (got.headers["x-api-key"], got.headers["x-team"]) == (API_KEY, "billing")
    assert rotated.headers["authorization"] == "Basic " + base64.b64encode(
        BASIC.encode()).decode()
    assert rotated.headers["x-api-key"] == "rotated-key-1" and rotated.signature_ok
    assert "authorization" not in cleared.headers and "x-api-key" not in cleared.headers
    assert cleared.headers["x-team"] == "billing"
    logged = caplog.text + _attempt_texts(db_url)
    assert "delivered" in logged or "200" in logged  # the log and attempts were written
    for secret in (TOKEN, API_KEY, BASIC, "pa55-w0rd-wire", "rotated-key-1",
                   base64.b64encode(BASIC.encode()).decode()):
        assert secret not in logged


def test_a_receiver_echoing_the_request_puts_no_secret_in_the_attempt_log(db_url: str) -> None:
    echo = f"got Authorization: Bearer {TOKEN} and X-Api-Key: {API_KEY}".encode()
    with Receiver(default=Behaviour(status=500, body=echo)) as rx:
        add_endpoint(db_url, rx.url + "/hooks", max_attempts=1, credentials=EndpointCredentials(
            secret_headers={"X-Api-Key": API_KEY}, bearer_token=TOKEN))
        emit(db_url, 1)
        drain(settings(db_url))
        assert rx.wait_for(1, 5)
    ((excerpt,),) = execute(db_url, f"SELECT response_excerpt FROM {SCHEMA}.delivery_attempts")
    assert excerpt == "got Authorization: Bearer [redacted] and X-Api-Key: [redacted]"


def test_ping_carries_the_credentials(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        eid = add_endpoint(db_url, rx.url + "/hooks", box=SecretBox(),
                           credentials=EndpointCredentials(secret_headers={"X-Api-Key": API_KEY},
                                                           basic_auth=BASIC))
        with psycopg.connect(db_url, autocommit=True) as c:
            endpoint = ep.get(c, eid, schema=SCHEMA)
            auth = ep.delivery_credentials(c, eid, schema=SCHEMA, box=SecretBox())
        result = asyncio.run(ping(settings(db_url), endpoint, [SECRET], auth=auth))
        (got,) = rx.wait(1, 5)
    assert result.ok and got.signature_ok
    assert got.headers["x-api-key"] == API_KEY
    assert got.headers["authorization"].startswith("Basic ")


# --- mutual TLS ------------------------------------------------------------------------

def _handshake(url: str, ca_file: str, cert: Path | None) -> str:
    """A bare TLS client's POST to the receiver: its first response line, or the error."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert is not None:
        context.load_cert_chain(cert)
    port = int(url.split(":")[2].split("/", maxsplit=1)[0])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            lines = tls.recv(64).decode().splitlines()
            return lines[0] if lines else "closed"
    except (ssl.SSLError, OSError) as exc:
        return f"refused: {exc}"


def test_mutual_tls_delivery_needs_the_endpoints_certificate(
        db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ca = CA()
    client = ca.issue("outbox-client")
    (tmp_path / "client.pem").write_text(client.cert + client.key)
    with MutualTLSReceiver(ca, tmp_path) as rx:
        # the receiver really requires a client certificate
        assert not _handshake(rx.url, rx.ca_file, None).startswith("HTTP")
        assert _handshake(rx.url, rx.ca_file, tmp_path / "client.pem") == "HTTP/1.0 200 OK"
        monkeypatch.setenv("SSL_CERT_FILE", rx.ca_file)  # trust the receiver's test CA
        eid = add_endpoint(db_url, rx.url, credentials=EndpointCredentials(
            tls_client_cert=client.cert, tls_client_key=client.key, bearer_token=TOKEN))
        emit(db_url, 2)
        drain(settings(db_url))
        assert len(rx.received) == 3  # the bare client's, then both deliveries
        for headers, subject in rx.received[1:]:
            assert subject == "commonName=outbox-client"
            assert headers["authorization"] == f"Bearer {TOKEN}"
        # a certificate the receiver does not trust (another CA's): refused, the delivery
        # fails (the worker trusted the receiver: the error is the receiver's refusal)
        stranger = CA("another CA").issue("outbox-client")
        _update(db_url, eid, tls_client_cert=stranger.cert, tls_client_key=stranger.key)
        emit(db_url, 1)
        drain(settings(db_url, max_attempts=1))
        assert len(rx.received) == 3
    states = execute(db_url, f"SELECT state, count(*) FROM {SCHEMA}.deliveries"
                             " GROUP BY state ORDER BY state")
    assert states == [("dead", 1), ("delivered", 2)]
    ((error,),) = execute(db_url, f"SELECT error FROM {SCHEMA}.delivery_attempts"
                                  " WHERE error IS NOT NULL")
    assert "CERTIFICATE_VERIFY_FAILED" not in error
    assert "alert unknown ca" in error.lower()
    logged = caplog.text + _attempt_texts(db_url)
    for secret in (TOKEN, client.key.splitlines()[1]):
        assert secret not in logged


def test_a_job_or_credentials_repr_shows_no_secret(db_url: str) -> None:
    import datetime as dt

    from outbox.delivery.ping import ping_job

    eid = add_endpoint(db_url, "https://hooks.example.com/x", box=SecretBox(),
                       credentials=EndpointCredentials(secret_headers={"X-Api-Key": API_KEY},
                                                       bearer_token=TOKEN))
    with psycopg.connect(db_url, autocommit=True) as c:
        endpoint = ep.get(c, eid, schema=SCHEMA)
        auth = ep.delivery_credentials(c, eid, schema=SCHEMA, box=SecretBox())
    job = ping_job(endpoint, [SECRET], dt.datetime.now(dt.UTC), auth=auth)
    assert job.auth_secret == TOKEN and job.secret_headers == {"X-Api-Key": API_KEY}
    for text in (repr(job), repr(auth)):
        assert TOKEN not in text and API_KEY not in text and "bearer" in text
