"""One bad row never stalls or repeats the others: poison isolation in the worker.

The bad rows are forced through SQL (as a manual UPDATE or a database written before the
bounds existed would leave them), not through the validated paths, which refuse them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
from cryptography.fernet import Fernet

import outbox
from outbox._security.secretbox import generate_key
from outbox.delivery.sender import make_transport
from outbox.delivery.worker import Worker
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.workers import add_endpoint, rows, settings

HEALTHY = 20


def _emit(db_url: str) -> None:
    """One poison-bound event and the healthy tenant's events, one transaction: they are
    claimed together and their results recorded in the same batch."""
    with psycopg.connect(db_url) as c:
        events = [outbox.Event("poison.event", {"n": 0}, tenant="acme")]
        events += [outbox.Event("healthy.event", {"n": i}, tenant="globex")
                   for i in range(HEALTHY)]
        outbox.emit_many(c, events)
        c.commit()


def _force(db_url: str, sql: str, endpoint: uuid.UUID) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        # the bounds a database written before them may lack (migrations/0007_bounds.sql)
        for name in ("endpoints_retry_base_bounds", "endpoints_retry_cap_bounds",
                     "endpoints_headers_valid"):
            c.execute(f"ALTER TABLE outbox.endpoints DROP CONSTRAINT IF EXISTS {name}".encode())
        c.execute(sql.encode(), (endpoint,))


def _run(db_url: str, done_sql: str, **overrides: Any) -> Worker:
    """One in-process worker until ``done_sql`` is true; returns it (metrics)."""
    async def main() -> Worker:
        async with make_transport() as transport:
            worker = Worker(settings(db_url, batch_size=100, **overrides), transport)
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 30
            while not (await asyncio.to_thread(rows, db_url, done_sql))[0][0]:
                assert time.monotonic() < deadline and not task.done(), "not reached"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # anything repeated would show now
            worker.stop()
            await task
            return worker

    return asyncio.run(main())


DONE = """SELECT count(*) FILTER (WHERE state = 'delivered') = 20
                 AND count(*) FILTER (WHERE state = 'dead') = 1
            FROM outbox.deliveries"""


def _check(db_url: str, rx: Receiver, worker: Worker, poison: uuid.UUID) -> str:
    """Healthy deliveries sent once and recorded once; returns the poison's last_error."""
    healthy = [r for r in rx.received if r.path == "/healthy"]
    assert len(healthy) == HEALTHY and len({r.headers["webhook-id"] for r in healthy}) == HEALTHY
    attempts: list[Any] = rows(db_url, """
        SELECT a.outcome, count(*) FROM outbox.delivery_attempt_log a
          JOIN outbox.deliveries d ON d.id = a.delivery_id
         WHERE d.endpoint_id <> %s GROUP BY 1""", (poison,))
    assert attempts == [("delivered", HEALTHY)]
    (state, attempts_n, error), = rows(db_url, """
        SELECT state, attempts, last_error FROM outbox.deliveries WHERE endpoint_id = %s""",
        (poison,))
    assert state == "dead" and attempts_n == 1
    logged = rows(db_url, """SELECT outcome FROM outbox.delivery_attempts a
                               JOIN outbox.deliveries d ON d.id = a.delivery_id
                              WHERE d.endpoint_id = %s""", (poison,))
    assert logged == [("poisoned",)]
    assert worker.metrics.poisoned._value.get() == 1
    return str(error)


def test_a_result_that_cannot_be_written_is_dead_lettered_alone(db_url: str) -> None:
    with Receiver() as rx:
        rx.script("/poison", [Behaviour(status=500)])
        poison = add_endpoint(db_url, rx.url + "/poison", tenant="acme",
                              event_types=["poison.event"])
        add_endpoint(db_url, rx.url + "/healthy", tenant="globex",
                     event_types=["healthy.event"])
        # a retry delay of ~1e299 s: now() + that overflows in the batched completion
        _force(db_url, "UPDATE outbox.endpoints SET retry_base_seconds = 'Infinity',"
                       " retry_cap_seconds = 1e300 WHERE id = %s", poison)
        _emit(db_url)
        worker = _run(db_url, DONE)
    error = _check(db_url, rx, worker, poison)
    assert "result not recordable" in error and "out of range" in error, error
    assert "retry" in error  # what the attempt itself was


def test_a_job_that_cannot_be_attempted_is_dead_lettered_alone(db_url: str) -> None:
    with Receiver() as rx:
        poison = add_endpoint(db_url, rx.url + "/poison", tenant="acme",
                              event_types=["poison.event"])
        add_endpoint(db_url, rx.url + "/healthy", tenant="globex",
                     event_types=["healthy.event"])
        _force(db_url, "UPDATE outbox.endpoints SET headers = '[\"x\"]' WHERE id = %s", poison)
        _emit(db_url)
        worker = _run(db_url, DONE)
    error = _check(db_url, rx, worker, poison)
    assert error.startswith("could not be attempted: ValueError"), error
    assert not [r for r in rx.received if r.path == "/poison"]


def test_a_secret_no_key_opens_is_dead_lettered_alone(db_url: str) -> None:
    """One endpoint's sealed secret opens with none of the worker's keys (sealed with a key
    since dropped, or tampered with): its delivery is dead-lettered unsent, the claim it
    came in goes on for everyone else (it used to fail the claim and stop the worker)."""
    with Receiver() as rx:
        poison = add_endpoint(db_url, rx.url + "/poison", tenant="acme",
                              event_types=["poison.event"])
        add_endpoint(db_url, rx.url + "/healthy", tenant="globex",
                     event_types=["healthy.event"])
        sealed_elsewhere = "enc:v1:" + Fernet(generate_key()).encrypt(b"whsec_x").decode()
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("UPDATE outbox.endpoints SET secret = %s WHERE id = %s",
                      (sealed_elsewhere, poison))
        _emit(db_url)
        worker = _run(db_url, DONE, secret_key=generate_key())
    error = _check(db_url, rx, worker, poison)
    assert error == ("could not be attempted: ConfigurationError: an endpoint secret does"
                     " not open with any key in OUTBOX_SECRET_KEY"), error
    assert not [r for r in rx.received if r.path == "/poison"]


def test_a_claimed_row_python_cannot_hold_is_dead_lettered_alone(db_url: str) -> None:
    """An event time of 'infinity' written by hand: the claim's rows load one by one once
    loading them all fails, that row is dead-lettered unsent, the others are delivered (it
    used to fail the claim after its commit and stop the worker, the whole claim leased)."""
    with Receiver() as rx:
        poison = add_endpoint(db_url, rx.url + "/poison", tenant="acme",
                              event_types=["poison.event"])
        add_endpoint(db_url, rx.url + "/healthy", tenant="globex",
                     event_types=["healthy.event"])
        _emit(db_url)
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("""UPDATE outbox.events SET created_at = 'infinity' WHERE id IN (
                           SELECT event_id FROM outbox.deliveries WHERE endpoint_id = %s)""",
                      (poison,))
        worker = _run(db_url, DONE)
    error = _check(db_url, rx, worker, poison)
    assert error.startswith("could not be loaded: DataError: timestamp too large"), error
    assert not [r for r in rx.received if r.path == "/poison"]


def test_an_attempts_count_at_int4s_end_does_not_fail_the_claim(db_url: str) -> None:
    """attempts = 2147483647 written by hand: the claim's attempts + 1 overflowed and the
    claim failed for everyone; capped, the row is claimed like any other (and, far past its
    max_attempts, dead after this attempt) and the others are delivered once."""
    with Receiver() as rx:
        rx.script("/poison", [Behaviour(status=500)])
        poison = add_endpoint(db_url, rx.url + "/poison", tenant="acme",
                              event_types=["poison.event"])
        add_endpoint(db_url, rx.url + "/healthy", tenant="globex",
                     event_types=["healthy.event"])
        _emit(db_url)
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("UPDATE outbox.deliveries SET attempts = 2147483647"
                      " WHERE endpoint_id = %s", (poison,))
        worker = _run(db_url, DONE)
    healthy = [r for r in rx.received if r.path == "/healthy"]
    assert len(healthy) == HEALTHY and len({r.headers["webhook-id"] for r in healthy}) == HEALTHY
    (state, attempts, error), = rows(db_url, """
        SELECT state, attempts, last_error FROM outbox.deliveries WHERE endpoint_id = %s""",
        (poison,))
    assert (state, attempts) == ("dead", 2147483647)
    assert str(error).startswith("attempts exhausted (2147483647/"), error
    assert worker.metrics.poisoned._value.get() == 0
