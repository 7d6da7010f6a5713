"""Ed25519 (``v1a``) endpoints end to end: a real ``outbox worker`` process delivers to a
real HTTP receiver on 127.0.0.1 and to the real brokers; every request's signature is
checked by the RFC 8032 reference verifier written in the tests (tests/support/rfc8032.py,
not the ``cryptography`` calls outbox signs with) over the spec's signed content
``{webhook-id}.{webhook-timestamp}.{body}``; during a rotation's grace both keys sign; the
receiving side (``outbox.verify`` in the receiver, ``outbox.inbox.receive``) accepts them."""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import psycopg
import pytest

from outbox.admin import endpoints as ep
from outbox.admin.migrations import migrate
from outbox.errors import InvalidSignature
from outbox.inbox import receive
from outbox.testing.receiver import Receiver
from tests.support import brokers as b
from tests.support import rfc8032
from tests.support.pg import SCHEMA
from tests.support.workers import (
    FAST,
    add_endpoint,
    emit,
    log_of,
    spawn,
    states,
    wait_until,
)

pytestmark = pytest.mark.slow  # worker processes


@contextmanager
def worker(db_url: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn(db_url, **FAST)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def v1a_checks(public_key: str, webhook_id: str, headers: Mapping[str, str], body: bytes
               ) -> list[bool]:
    """Each v1a entry of the request, verified independently over the spec's content
    (a Redis stream entry names its fields ``timestamp`` and ``signature``)."""
    timestamp = headers.get("webhook-timestamp", headers.get("timestamp"))
    content = f"{webhook_id}.{timestamp}.".encode() + body
    raw = base64.b64decode(public_key.removeprefix("whpk_"), validate=True)
    entries = headers.get("webhook-signature", headers.get("signature", "")).split(" ")
    assert all(e.startswith("v1a,") for e in entries), entries  # never a v1 (HMAC) entry
    return [rfc8032.verify(raw, content, base64.b64decode(e[4:], validate=True))
            for e in entries]


def public_key(db_url: str, endpoint_id: uuid.UUID) -> ep.Endpoint:
    with psycopg.connect(db_url, autocommit=True) as c:
        return ep.get(c, endpoint_id, schema=SCHEMA)


def test_a_real_receiver_gets_v1a_deliveries_and_both_keys_sign_during_rotation(
        db_url: str) -> None:
    with Receiver() as rx, worker(db_url) as proc:
        eid = add_endpoint(db_url, rx.url + "/hook", signature="ed25519", secret=None)
        first = public_key(db_url, eid)
        assert first.public_key is not None
        before = emit(db_url, 3, "invoice.paid")
        assert rx.wait_for(3, 30)
        with psycopg.connect(db_url, autocommit=True) as c:
            rotated = ep.rotate_secret(c, eid, schema=SCHEMA, grace=dt.timedelta(hours=1))
        after = emit(db_url, 2, "invoice.paid")
        assert rx.wait_for(5, 30)
        with psycopg.connect(db_url, autocommit=True) as c:
            keys = ep.signing_secrets(c, eid, schema=SCHEMA)
        log = log_of(proc)
    assert "whsk_" not in log and not any(k[5:] in log for k in keys)  # never logged
    new_key = rotated.endpoint.public_key
    assert new_key is not None and new_key != first.public_key
    got = {r.webhook_id: r for r in rx.received}
    assert set(got) == {str(i) for i in before + after}
    for event_id in before:
        r = got[str(event_id)]
        assert v1a_checks(first.public_key, str(event_id), r.headers, r.body) == [True]
        assert v1a_checks(new_key, str(event_id), r.headers, r.body) == [False]
    for event_id in after:  # the overlap: the new key's entry, then the old key's
        r = got[str(event_id)]
        assert v1a_checks(new_key, str(event_id), r.headers, r.body) == [True, False]
        assert v1a_checks(first.public_key, str(event_id), r.headers, r.body) == [False, True]


def test_receiving_side_accepts_v1a_with_the_public_key(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        migrate(c, SCHEMA, inbox=True)
    # the key first (as a receiver learns it), then a receiver verifying with it
    eid = add_endpoint(db_url, "http://127.0.0.1:9/later", signature="ed25519", secret=None)
    key = str(public_key(db_url, eid).public_key)
    with Receiver(secret=key) as rx, worker(db_url):
        with psycopg.connect(db_url, autocommit=True) as c:
            ep.update(c, eid, schema=SCHEMA, url=rx.url + "/hook")
        (event_id,) = emit(db_url, 1, "invoice.paid")
        assert rx.wait_for(1, 30)
    (r,) = rx.received
    assert r.signature_ok is True  # outbox.verify with the whpk_ key, in the receiver
    with psycopg.connect(db_url) as c:
        with c.transaction():
            event = receive(c, key, r.body, r.headers)
        assert event is not None and event.webhook_id == str(event_id)
        with c.transaction():
            assert receive(c, key, r.body, r.headers) is None  # the same id, once
        tampered = r.body.replace(b"}", b' , "x": 1}', 1)
        with pytest.raises(InvalidSignature, match="no matching v1a"), c.transaction():
            receive(c, key, tampered, r.headers)
        other = add_endpoint(db_url, "http://127.0.0.1:9/x", signature="ed25519", secret=None)
        with pytest.raises(InvalidSignature, match="no matching v1a"), c.transaction():
            receive(c, str(public_key(db_url, other).public_key), r.body, r.headers)


def test_brokers_carry_v1a_signatures(db_url: str) -> None:
    b.require()
    exchange, queue = b.unique("ex"), b.unique("q")
    b.run(b.amqp_queue(exchange, queue))
    stream, subject = b.unique("S"), b.unique("events")
    b.run(b.nats_stream(stream, [f"{subject}.>"]))
    rstream = b.unique("events")
    urls = [f"amqp://guest:guest@127.0.0.1:5672/?exchange={exchange}",
            f"nats://127.0.0.1:4222?subject={subject}.all",
            f"redis://127.0.0.1:6379/0?stream={rstream}"]
    keys = [str(public_key(db_url, add_endpoint(db_url, url, signature="ed25519",
                                                secret=None)).public_key) for url in urls]
    with worker(db_url):
        ids = emit(db_url, 2, "order.paid")
        wait_until(lambda: states(db_url) == {"delivered": 6}, 60, "6 deliveries")
    consumed = [b.run(b.amqp_drain(queue)), b.run(b.nats_drain(stream)),
                b.run(b.redis_drain(rstream))]
    for key, got in zip(keys, consumed, strict=True):
        assert sorted(g.id for g in got) == sorted(str(i) for i in ids)
        for g in got:
            assert json.loads(g.body)  # the event's bytes
            assert v1a_checks(key, g.id, g.headers, g.body) == [True]
