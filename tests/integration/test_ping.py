"""`outbox.delivery.ping`: one request built and judged as the worker builds and judges it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import psycopg

from outbox._security.secretbox import SecretBox
from outbox.admin import endpoints as ep
from outbox.delivery.outcome import Verdict
from outbox.delivery.ping import PING_TYPE, PingResult, ping
from outbox.signing import verify
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.cli import snapshot
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, settings


def _ping(db_url: str, endpoint: ep.Endpoint, **overrides: Any) -> PingResult:
    with psycopg.connect(db_url, autocommit=True) as conn:
        secrets = ep.signing_secrets(conn, endpoint.id, schema=SCHEMA, box=SecretBox())
    return asyncio.run(ping(settings(db_url, **overrides), endpoint, secrets))


def _endpoint(db_url: str, url: str, **kwargs: Any) -> ep.Endpoint:
    """:func:`add_endpoint` (secret stored plain, as ``_ping`` opens it), read back whole."""
    endpoint_id = add_endpoint(db_url, url, box=SecretBox(), **kwargs)
    with psycopg.connect(db_url, autocommit=True) as conn:
        return ep.get(conn, endpoint_id, schema=SCHEMA)


def test_ping_is_signed_like_a_delivery_and_writes_nothing(db_url: str) -> None:
    with Receiver(secret=SECRET, default=Behaviour(body=b"pong")) as rx:
        endpoint = _endpoint(db_url, rx.url + "/hook", headers={"X-Team": "billing"})
        before = snapshot(db_url)
        result = _ping(db_url, endpoint, user_agent="pinger/1")
        assert rx.wait_for(1, 5)
    (got,) = rx.received
    assert got.signature_ok is True and got.webhook_id == result.webhook_id
    assert got.headers["idempotency-key"] == result.webhook_id
    assert got.headers["user-agent"] == "pinger/1"
    assert got.headers["x-team"] == "billing"
    body = json.loads(got.body)
    assert body["type"] == PING_TYPE and body["data"] == {"endpoint_id": str(endpoint.id)}
    assert (result.status, result.verdict, result.ok) == (200, Verdict.DELIVERED, True)
    assert (result.url, result.response, result.error) == (endpoint.url, "pong", None)
    assert snapshot(db_url) == before


def test_ping_signs_with_both_secrets_during_a_rotation(db_url: str) -> None:
    with Receiver() as rx:
        endpoint = _endpoint(db_url, rx.url + "/hook")
        with psycopg.connect(db_url, autocommit=True) as conn:
            new = ep.rotate_secret(conn, endpoint.id, schema=SCHEMA,
                                   grace=dt.timedelta(hours=1), box=SecretBox()).secret
        assert new is not None  # an hmac endpoint's new secret (ed25519: never returned)
        assert _ping(db_url, endpoint).ok
        assert rx.wait_for(1, 5)
    (got,) = rx.received
    assert len(got.headers["webhook-signature"].split()) == 2
    for secret in (new, SECRET):
        verify(secret, got.body, got.headers)


def test_ping_uses_the_endpoint_timeout_and_judges_like_the_worker(db_url: str) -> None:
    with Receiver(default=Behaviour(status=200, delay=3.0)) as rx:
        endpoint = _endpoint(db_url, rx.url + "/slow", timeout_seconds=0.3)
        result = _ping(db_url, endpoint, http_timeout_seconds=4.0)
    # the endpoint's 0.3 s ended the attempt: under the worker's 4 s the receiver's answer,
    # 3 s late, would have arrived (status 200, DELIVERED). Both the endpoint's total and its
    # read timeout are 0.3 s; whichever fires first names itself.
    assert result.status is None and result.verdict is Verdict.RETRY and not result.ok
    assert result.error == "total timeout after 0.3s" or (
        result.error or "").startswith("timeout after"), result.error


def test_ping_to_a_refused_address_sends_nothing(db_url: str) -> None:
    with Receiver() as rx:
        endpoint = _endpoint(db_url, rx.url + "/hook")
        result = _ping(db_url, endpoint, allow_networks="")
    assert rx.received == []
    assert result.status is None and result.verdict is Verdict.DEAD
    assert result.error and "loopback" in result.error and "OUTBOX_ALLOW_NETWORKS" in result.error
