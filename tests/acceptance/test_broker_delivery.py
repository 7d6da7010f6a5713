"""Worker processes relaying to the real RabbitMQ, NATS JetStream and Redis: every
committed event arrives once per destination with its id as the message id and its exact
bytes; a SIGKILLed worker loses nothing; refusals dead-letter with a readable error and a
replay after the fix delivers; ordered keys arrive in order."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pytest

from outbox.admin import endpoints as ep
from tests.integration.test_ordered import emit_keyed
from tests.support import brokers as b
from tests.support.cli import invoke
from tests.support.pg import SCHEMA
from tests.support.workers import FAST, add_endpoint, emit, log_of, rows, spawn, states, wait_until

pytestmark = pytest.mark.slow  # worker processes against three brokers


@contextmanager
def workers(db_url: str, n: int, **env: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [spawn(db_url, **{**FAST, "OUTBOX_CONCURRENCY": "40",
                              "OUTBOX_BREAKER_COOLDOWN_SECONDS": "0.5", **env}) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


@dataclass
class Destinations:
    """One fresh exchange+queue, JetStream stream and Redis stream, registered."""

    queue: str
    stream: str
    rstream: str

    def consumed(self) -> list[list[b.Got]]:
        return [b.run(b.amqp_drain(self.queue)), b.run(b.nats_drain(self.stream)),
                b.run(b.redis_drain(self.rstream))]


def destinations(db_url: str, **endpoint: object) -> Destinations:
    b.require()
    exchange, queue = b.unique("ex"), b.unique("q")
    b.run(b.amqp_queue(exchange, queue))
    stream, subject = b.unique("S"), b.unique("events")
    b.run(b.nats_stream(stream, [f"{subject}.>"]))
    rstream = b.unique("events")
    add_endpoint(db_url, f"amqp://guest:guest@127.0.0.1:5672/?exchange={exchange}", **endpoint)
    add_endpoint(db_url, f"nats://127.0.0.1:4222?subject={subject}.all", **endpoint)
    add_endpoint(db_url, f"redis://127.0.0.1:6379/0?stream={rstream}", **endpoint)
    return Destinations(queue, stream, rstream)


def payloads(db_url: str) -> dict[str, bytes]:
    return {str(i): p.encode() for i, p in rows(db_url, f"SELECT id, payload::text"
                                                        f" FROM {SCHEMA}.events")}


def test_every_event_arrives_once_per_broker_with_its_id_and_bytes(db_url: str) -> None:
    dest = destinations(db_url)
    with workers(db_url, 2):
        ids = emit(db_url, 600, "order.paid")
        wait_until(lambda: states(db_url) == {"delivered": 1800}, 120, "1800 deliveries")
    sent = payloads(db_url)
    for got in dest.consumed():
        assert sorted(g.id for g in got) == sorted(str(i) for i in ids)  # once each
        assert all(g.body == sent[g.id] for g in got)


def test_a_sigkilled_worker_loses_nothing(db_url: str) -> None:
    dest = destinations(db_url)
    lease = {"OUTBOX_LEASE_SECONDS": "3", "OUTBOX_HTTP_TIMEOUT_SECONDS": "2"}
    ids = {str(i) for i in emit(db_url, 1500)}
    with workers(db_url, 1, **lease) as (victim,):
        wait_until(lambda: states(db_url).get("delivered", 0) >= 300, 60, "some deliveries")
        victim.kill()  # SIGKILL: nothing recorded for what was in flight
        victim.wait(10)
    assert states(db_url).get("pending", 0) > 0
    with workers(db_url, 1, **lease):
        wait_until(lambda: states(db_url) == {"delivered": 4500}, 120, "every delivery")
    for got in dest.consumed():
        assert {g.id for g in got} == ids  # duplicates possible (in flight at the kill)
        assert len(got) - len(ids) <= 3 * 40


def test_refusals_dead_letter_readably_and_a_replay_after_the_fix_delivers(db_url: str) -> None:
    b.require()
    exchange, queue, stream, subject = b.unique("ex"), b.unique("q"), b.unique("S"), b.unique("s")
    rkey = b.unique("not-a-stream")
    b.run(_redis_set(rkey))
    retry = {"max_attempts": 3}
    amqp_bad_login = add_endpoint(
        db_url, f"amqp://guest:wrong@127.0.0.1/?exchange={exchange}", **retry)
    add_endpoint(db_url, f"amqp://guest:guest@127.0.0.1/?exchange={exchange}", **retry)
    add_endpoint(db_url, f"nats://127.0.0.1?subject={subject}", **retry)
    add_endpoint(db_url, f"redis://127.0.0.1/0?stream={rkey}", **retry)
    ids = {str(i) for i in emit(db_url, 5)}
    with workers(db_url, 1) as (worker,):
        wait_until(lambda: states(db_url) == {"dead": 20}, 60, "20 dead letters")
        assert "guest:wrong" not in log_of(worker) and ":wrong@" not in log_of(worker)
    errors = dict(rows(db_url, f"SELECT e.url, min(d.last_error) FROM {SCHEMA}.deliveries d"
                               f" JOIN {SCHEMA}.endpoints e ON e.id = d.endpoint_id"
                               f" GROUP BY e.id, e.url"))
    assert len(errors) == 3  # the two amqp endpoints show the same (credential-free) URL
    assert any("ACCESS_REFUSED" in e or "no exchange" in e for e in errors.values())
    assert "no JetStream stream takes subject" in errors[f"nats://127.0.0.1?subject={subject}"]
    assert "WRONGTYPE" in errors[f"redis://127.0.0.1/0?stream={rkey}"]
    classes = {c for (c,) in rows(db_url, f"SELECT DISTINCT error_class FROM"
                                          f" {SCHEMA}.delivery_attempts")}
    # (broker_connect: an AMQP channel closed by a concurrent publish's 404, or reconnecting)
    assert {"broker_auth", "broker_refused"} <= classes <= {"broker_auth", "broker_refused",
                                                            "broker_connect"}
    # the fixes: the exchange and stream exist, the key is gone, the password is right
    b.run(b.amqp_queue(exchange, queue))
    b.run(b.nats_stream(stream, [subject]))
    b.run(_redis_delete(rkey))
    with psycopg.connect(db_url, autocommit=True) as conn:
        ep.update(conn, amqp_bad_login, schema=SCHEMA,
                  url=f"amqp://guest:guest@127.0.0.1/?exchange={exchange}")
    replayed = invoke(db_url, "replay", "--all", "--json")
    assert replayed.exit_code == 0, replayed.output
    with workers(db_url, 1):
        wait_until(lambda: states(db_url) == {"delivered": 20}, 60, "20 replayed deliveries")
    amqp = b.run(b.amqp_drain(queue))
    assert sorted(g.id for g in amqp) == sorted([*ids, *ids])  # two amqp endpoints
    assert {g.id for g in b.run(b.nats_drain(stream))} == ids
    assert {g.id for g in b.run(b.redis_drain(rkey))} == ids


async def _redis_set(key: str) -> None:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(b.REDIS_URL)
    await client.set(key, "a plain string", ex=300)
    await client.aclose()


async def _redis_delete(key: str) -> None:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(b.REDIS_URL)
    await client.delete(key)
    await client.aclose()


def test_ordered_keys_arrive_in_order_at_each_broker(db_url: str) -> None:
    dest = destinations(db_url, ordered=True)
    pairs = [(f"k{i % 8}", i) for i in range(400)]
    with workers(db_url, 2):
        emit_keyed(db_url, pairs)
        wait_until(lambda: states(db_url) == {"delivered": 1200}, 120, "1200 deliveries")
    for got in dest.consumed():
        seen: dict[str, list[int]] = {}
        for g in got:
            data = json.loads(g.body)
            seen.setdefault(data["key"], []).append(data["n"])
        assert len(got) == 400
        assert all(ns == sorted(ns) for ns in seen.values()), seen
