"""The broker transports against the real RabbitMQ, NATS JetStream and Redis: one
delivery through the worker's own send path (``send_job``), what the consumer receives,
and how refusals are classified."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import nats
import pytest
import redis.asyncio
from standardwebhooks import Webhook

from outbox._destinations import split_credentials
from outbox._security.ssrf import parse_networks
from outbox.delivery import transports
from outbox.delivery.jobs import Job
from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.request import send_job
from outbox.delivery.sender import Transport
from tests.support import brokers as b
from tests.support.net import free_port
from tests.support.workers import SECRET, settings

LOOPBACK = GuardedResolver(parse_networks("127.0.0.0/8"))


def job(url: str, *, event_type: str = "order.paid", payload: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None) -> Job:
    stored, credentials = split_credentials(url)
    body = json.dumps(payload or {"type": event_type, "data": {"n": 1, "é": "ü"}},
                      separators=(",", ":"), ensure_ascii=False)
    return Job(delivery_id=1, attempt=1, token=uuid.uuid4(), event_id=uuid.uuid4(),
               event_type=event_type, payload=body, emitted_at=dt.datetime.now(dt.UTC),
               endpoint_id=uuid.uuid4(), url=stored, enabled=True, secret=SECRET,
               previous_secret=None, headers=headers or {}, max_attempts=None,
               retry_base_seconds=None, retry_cap_seconds=None, timeout_seconds=None,
               credentials=credentials)


async def _send(*jobs: Job, resolver: GuardedResolver | None = LOOPBACK,
                transport: Transport | None = None) -> list[AttemptResult]:
    cfg = settings("postgresql://unused/", http_timeout_seconds=5.0, lease_seconds=30.0)
    own = transport or Transport(resolver=resolver)
    try:
        return list(await asyncio.gather(*(send_job(own, j, cfg, timestamp=int(time.time()))
                                           for j in jobs)))
    finally:
        if transport is None:
            await own.aclose()


def send(*jobs: Job, **kwargs: Any) -> list[AttemptResult]:
    return asyncio.run(_send(*jobs, **kwargs))


def verify(j: Job, body: bytes, webhook_id: str, timestamp: str, signature: str) -> None:
    Webhook(SECRET).verify(body, {"webhook-id": webhook_id, "webhook-timestamp": timestamp,
                                  "webhook-signature": signature})
    assert body == j.payload.encode()


# --- RabbitMQ -------------------------------------------------------------------------

def test_amqp_delivers_a_confirmed_persistent_message_with_the_signed_bytes() -> None:
    b.require("amqp")
    exchange, queue = b.unique("ex"), b.unique("q")
    b.run(b.amqp_queue(exchange, queue, "order.*"))
    j = job(f"amqp://guest:guest@127.0.0.1:5672/?exchange={exchange}",
            headers={"X-Team": "billing"})
    (result,) = send(j)
    assert result.verdict is Verdict.DELIVERED, result
    assert result.status_code is None and "confirmed" in (result.response_excerpt or "")
    (got,) = b.run(b.amqp_drain(queue))
    assert got.id == j.webhook_id and got.body == j.payload.encode()
    assert got.extra == {"type": "order.paid", "content_type": "application/json",
                         "delivery_mode": 2, "routing_key": "order.paid"}
    assert got.headers["webhook-id"] == j.webhook_id and got.headers["X-Team"] == "billing"
    verify(j, got.body, got.headers["webhook-id"], got.headers["webhook-timestamp"],
           got.headers["webhook-signature"])


def test_amqp_default_exchange_and_routing_key_option() -> None:
    b.require("amqp")
    queue = b.unique("q")
    b.run(b.amqp_queue(None, queue))
    j = job(f"amqp://guest:guest@127.0.0.1/%2F?routing_key={queue}")
    assert send(j)[0].verdict is Verdict.DELIVERED
    assert [g.id for g in b.run(b.amqp_drain(queue))] == [j.webhook_id]


def test_amqp_refusals_are_failed_attempts_with_a_readable_error() -> None:
    b.require("amqp")
    exchange = b.unique("ex")
    unknown, unroutable, login = send(
        job(f"amqp://guest:guest@127.0.0.1/?exchange={b.unique('missing')}"),
        job(f"amqp://guest:guest@127.0.0.1/?routing_key={b.unique('noqueue')}"),
        job(f"amqp://guest:wrong-pass-xyz@127.0.0.1/?exchange={exchange}"))
    assert (unknown.verdict, unknown.error_class) == (Verdict.RETRY, "broker_refused")
    assert "no exchange" in (unknown.error or "")
    assert (unroutable.verdict, unroutable.error_class) == (Verdict.RETRY, "broker_refused")
    assert "unroutable: NO_ROUTE" in (unroutable.error or "")
    assert (login.verdict, login.error_class) == (Verdict.RETRY, "broker_auth")
    assert "ACCESS_REFUSED" in (login.error or "") and "wrong-pass" not in (login.error or "")


def test_amqp_one_connection_per_destination_reopened_after_a_refusal() -> None:
    b.require("amqp")
    exchange, queue = b.unique("ex"), b.unique("q")

    async def scenario() -> tuple[list[AttemptResult], AttemptResult, AttemptResult, bool]:
        transport = Transport(resolver=LOOPBACK)
        url = f"amqp://guest:guest@127.0.0.1/?exchange={exchange}"
        try:
            refused = (await _send(job(url), transport=transport))[0]  # exchange missing
            await b.amqp_queue(exchange, queue)
            link = transport.brokers.link(*split_credentials(url))
            link._retry_at = 0.0  # (skip the reconnect backoff the refusal started)
            many = await _send(*(job(url) for _ in range(20)), transport=transport)
            first = link._publisher
            again = (await _send(job(url), transport=transport))[0]
            return many, refused, again, first is link._publisher and first is not None
        finally:
            await transport.aclose()

    many, refused, again, same = b.run(scenario())
    assert refused.error_class == "broker_refused"
    assert all(r.verdict is Verdict.DELIVERED for r in many) and again.verdict is Verdict.DELIVERED
    assert same  # concurrent deliveries shared one publisher, kept for the next one
    assert len(b.run(b.amqp_drain(queue))) == 21



def test_amqp_a_nack_is_a_failed_attempt() -> None:
    b.require("amqp")
    full = b.unique("full")  # a queue that refuses every message: the broker nacks it

    async def declare() -> None:
        conn = await aio_pika.connect(b.AMQP_URL)
        async with conn:
            ch = await conn.channel()
            await ch.declare_queue(full, durable=True, arguments={
                "x-max-length": 0, "x-overflow": "reject-publish"})

    b.run(declare())
    try:
        (nacked,) = send(job(f"amqp://guest:guest@127.0.0.1/?routing_key={full}"))
        assert (nacked.verdict, nacked.error_class) == (Verdict.RETRY, "broker_refused")
        assert "nacked by the broker" in (nacked.error or ""), nacked
    finally:
        assert b.run(b.amqp_drain(full)) == []

# --- NATS JetStream -------------------------------------------------------------------

def test_nats_publishes_to_jetstream_with_the_event_id_as_msg_id() -> None:
    b.require("nats")
    stream, subject = b.unique("S"), b.unique("orders")
    b.run(b.nats_stream(stream, [f"{subject}.>"]))
    j = job(f"nats://127.0.0.1:4222?subject={subject}.paid")
    first, duplicate = send(j, j)
    assert first.verdict is Verdict.DELIVERED and duplicate.verdict is Verdict.DELIVERED
    assert {first.response_excerpt, duplicate.response_excerpt} == {
        f"stream {stream} seq 1", f"stream {stream} seq 1 (duplicate)"}
    (got,) = b.run(b.nats_drain(stream))  # the duplicate window dropped the re-publish
    assert got.id == j.webhook_id and got.body == j.payload.encode()
    assert got.headers["Outbox-Event-Type"] == "order.paid"
    verify(j, got.body, got.headers["webhook-id"], got.headers["webhook-timestamp"],
           got.headers["webhook-signature"])


def test_nats_subject_defaults_to_the_event_type_and_no_stream_is_refused() -> None:
    b.require("nats")
    stream, event_type = b.unique("S"), b.unique("evt")
    b.run(b.nats_stream(stream, [event_type]))
    ok, missing = send(job("nats://127.0.0.1", event_type=event_type),
                       job(f"nats://127.0.0.1?subject={b.unique('nowhere')}"))
    assert ok.verdict is Verdict.DELIVERED
    assert (missing.verdict, missing.error_class) == (Verdict.RETRY, "broker_refused")
    assert "no JetStream stream takes subject" in (missing.error or "")
    assert len(b.run(b.nats_drain(stream))) == 1


# --- Redis Streams --------------------------------------------------------------------

def test_redis_xadds_the_standard_webhooks_fields_and_trims() -> None:
    b.require("redis")
    stream = b.unique("orders")
    jobs = [job(f"redis://127.0.0.1:6379/0?stream={stream}&maxlen=1000") for _ in range(3)]
    results = send(*jobs)
    assert all(r.verdict is Verdict.DELIVERED for r in results), results
    got = b.run(b.redis_drain(stream))
    assert sorted(g.id for g in got) == sorted(j.webhook_id for j in jobs)
    by_id = {j.webhook_id: j for j in jobs}
    for g in got:
        assert set(g.headers) == {"webhook-id", "type", "timestamp", "signature", "payload"}
        assert g.body == by_id[g.id].payload.encode() and g.headers["type"] == "order.paid"
        verify(by_id[g.id], g.body, g.id, g.headers["timestamp"], g.headers["signature"])



def test_redis_maxlen_trims_the_stream_approximately() -> None:
    b.require("redis")
    stream = b.unique("trimmed")
    results = send(*(job(f"redis://127.0.0.1/0?stream={stream}&maxlen=10") for _ in range(300)))
    assert all(r.verdict is Verdict.DELIVERED for r in results)

    async def length() -> tuple[int, int]:
        client = redis.asyncio.Redis.from_url(b.REDIS_URL)
        try:
            config = await client.config_get("stream-node-max-entries")
            node = int(str(config["stream-node-max-entries"]))
            return await client.xlen(stream), node
        finally:
            await client.delete(stream)
            await client.aclose()

    kept, node = b.run(length())
    assert 10 <= kept <= 10 + node  # MAXLEN ~: at least 10, whole macro nodes trimmed

def test_redis_refusals_wrong_type_and_unknown_user() -> None:
    b.require("redis")
    key = b.unique("plain")

    async def setup() -> None:
        client = redis.asyncio.Redis.from_url(b.REDIS_URL)
        await client.set(key, "not a stream", ex=60)
        await client.aclose()

    b.run(setup())
    wrong, login = send(job(f"redis://127.0.0.1/0?stream={key}"),
                        job(f"redis://nobody:sesame-xyz@127.0.0.1/0?stream={b.unique('s')}"))
    assert (wrong.verdict, wrong.error_class) == (Verdict.RETRY, "broker_refused")
    assert "WRONGTYPE" in (wrong.error or "")
    assert (login.verdict, login.error_class) == (Verdict.RETRY, "broker_auth")
    assert "sesame" not in (login.error or "")


# --- every broker ---------------------------------------------------------------------

@pytest.mark.parametrize("url", ["amqp://guest:guest@127.0.0.1/", "nats://127.0.0.1",
                                 "redis://127.0.0.1/0?stream=s", "nats://127.0.0.2:4222"])
def test_the_ssrf_guard_refuses_a_loopback_broker_unless_allowed(url: str) -> None:
    (result,) = send(job(url), resolver=GuardedResolver(()))
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf")


@pytest.mark.parametrize("url", ["amqp://guest:guest@localhost/", "nats://localhost",
                                 "redis://localhost/0?stream=s"])
def test_the_ssrf_guard_refuses_localhost_names(url: str) -> None:
    (result,) = send(job(url), resolver=GuardedResolver(()))
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf")


@pytest.mark.parametrize("url", ["amqp://guest:guest@127.0.0.1:1/", "nats://127.0.0.1:1",
                                 "redis://127.0.0.1:1/0?stream=s"])
def test_a_broker_that_is_down_is_a_retry(url: str) -> None:
    (result,) = send(job(url))
    assert (result.verdict, result.error_class) == (Verdict.RETRY, "broker_connect"), result


def test_a_broken_broker_costs_one_connect_per_backoff_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker that accepts and hangs up at once: one connect, then deliveries fail fast
    with the last connect error until the (growing) backoff window has passed."""
    monkeypatch.setattr(transports, "BACKOFF_BASE", 1.0)  # windows 0.5-1 s, then 1-2 s
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    port, accepts = listener.getsockname()[1], []

    async def scenario() -> list[list[AttemptResult]]:
        transport = Transport(resolver=LOOPBACK)
        url = f"redis://127.0.0.1:{port}/0?stream=s"

        async def burst() -> list[AttemptResult]:
            return [(await _send(job(url), transport=transport))[0] for _ in range(4)]

        def hang_up() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                accepts.append(1)
                conn.close()

        threading.Thread(target=hang_up, daemon=True).start()
        try:
            first = await burst()
            await asyncio.sleep(1.05)  # past the first window
            return [first, await burst()]
        finally:
            await transport.aclose()
            listener.close()

    first, second = b.run(scenario())
    assert len(accepts) == 2  # one connect per window, not one per delivery
    for results in (first, second):
        assert all((r.verdict, r.error_class) == (Verdict.RETRY, "broker_connect")
                   for r in results), results
        assert "reconnecting in" not in (results[0].error or "")
        assert all("reconnecting in" in (r.error or "") for r in results[1:]), results
        assert all((results[0].error or "") in (r.error or "") for r in results[1:])


@pytest.fixture
def nats_with_login(tmp_path: Path) -> Iterator[int]:
    """A second, real nats-server with JetStream that requires app/sesame, on a free port."""
    port = free_port()
    proc = subprocess.Popen(["/usr/sbin/nats-server", "-a", "127.0.0.1", "-p", str(port), "-js",
                             "-sd", str(tmp_path), "--user", "app", "--pass", "sesame-nats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no nats-server"
                time.sleep(0.1)
        yield port
    finally:
        proc.kill()
        proc.wait(10)


def test_nats_login_refused_then_accepted(nats_with_login: int) -> None:
    port = nats_with_login

    async def stream() -> None:
        nc = await nats.connect(f"nats://app:sesame-nats@127.0.0.1:{port}")
        await nc.jetstream().add_stream(name="AUTH", subjects=["auth.>"])
        await nc.close()

    b.run(stream())
    wrong, right = send(job(f"nats://app:wrong-nats-pass@127.0.0.1:{port}?subject=auth.x"),
                        job(f"nats://app:sesame-nats@127.0.0.1:{port}?subject=auth.x"))
    assert (wrong.verdict, wrong.error_class) == (Verdict.RETRY, "broker_auth"), wrong
    assert "wrong-nats-pass" not in (wrong.error or "")
    assert right.verdict is Verdict.DELIVERED and right.response_excerpt == "stream AUTH seq 1"


def test_redis_connection_killed_by_the_server_is_reopened() -> None:
    b.require("redis")
    stream = b.unique("s")
    url = f"redis://127.0.0.1/0?stream={stream}"

    async def scenario() -> list[AttemptResult]:
        transport = Transport(resolver=LOOPBACK)
        try:
            results = await _send(job(url), transport=transport)
            publisher = transport.brokers.link(url, None)._publisher
            assert publisher is not None
            own_id = await publisher._client.client_id()  # type: ignore[attr-defined]
            admin = redis.asyncio.Redis.from_url(b.REDIS_URL)
            await admin.client_kill_filter(_id=own_id)
            await admin.aclose()
            for _ in range(3):  # a failed attempt at most, then a new connection
                results += await _send(job(url), transport=transport)
                await asyncio.sleep(0.25)
            return results
        finally:
            await transport.aclose()

    results = b.run(scenario())
    assert results[0].verdict is Verdict.DELIVERED and results[-1].verdict is Verdict.DELIVERED
    assert sum(r.verdict is not Verdict.DELIVERED for r in results) <= 1, results
    failed = [r for r in results if r.verdict is not Verdict.DELIVERED]
    assert all(r.verdict is Verdict.RETRY for r in failed)
    assert len(b.run(b.redis_drain(stream))) == sum(
        r.verdict is Verdict.DELIVERED for r in results)
