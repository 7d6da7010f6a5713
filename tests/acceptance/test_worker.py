"""The delivery worker against a real PostgreSQL and a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from outbox.admin import endpoints as ep
from outbox.delivery.jobs import Completion
from outbox.delivery.store import Store
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.workers import (
    SECRET,
    add_endpoint,
    drain,
    emit,
    rows,
    run_until,
    settings,
    states,
)


def test_delivers_signed_requests(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        add_endpoint(db_url, rx.url + "/hook", headers={"X-Team": "billing"})
        ids = emit(db_url, 3, "invoice.paid")
        stats = drain(settings(db_url))
        assert rx.wait_for(3, 5)
    assert stats["delivered"] == 3
    got = {r.webhook_id: r for r in rx.received}
    assert set(got) == {str(i) for i in ids}
    for event_id, record in got.items():
        assert record.signature_ok is True
        assert record.headers["idempotency-key"] == event_id
        assert record.headers["content-type"] == "application/json"
        assert record.headers["user-agent"].startswith("outbox-webhooks/")
        assert record.headers["x-team"] == "billing"
        assert json.loads(record.body)["n"] in (0, 1, 2)
    assert states(db_url) == {"delivered": 3}
    log = rows(db_url, "SELECT a.attempt, outcome, status_code, duration_ms > 0, worker <> '',"
                       " a.created_at = d.finished_at FROM outbox.delivery_attempt_log a"
                       " JOIN outbox.deliveries d ON d.id = a.delivery_id")
    assert sorted(log) == [(1, "delivered", 200, True, True, True)] * 3
    # first-try successes live on their delivery row: no attempt-log row of their own
    assert rows(db_url, "SELECT count(*) FROM outbox.delivery_attempts") == [(0,)]


def test_retry_until_delivered(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/flaky", [Behaviour(status=503), Behaviour(status=503), Behaviour(status=200)])
        add_endpoint(db_url, rx.url + "/flaky", retry_base_seconds=0.2, retry_cap_seconds=1.0)
        (event_id,) = emit(db_url, 1)
        run_until(settings(db_url), lambda: states(db_url) == {"delivered": 1})
    assert [r.webhook_id for r in rx.received] == [str(event_id)] * 3
    log = rows(db_url, "SELECT attempt, outcome, status_code, error, created_at"
                       " FROM outbox.delivery_attempts ORDER BY attempt")
    assert [(a, o, s) for a, o, s, _e, _t in log] == [
        (1, "retry", 503), (2, "retry", 503), (3, "delivered", 200)]
    assert log[0][3] == "HTTP 503"
    # full jitter: the n-th wait is uniform in [0, base * 2**(n-1)] (+ polling slack)
    gaps = [(log[i + 1][4] - log[i][4]).total_seconds() for i in range(2)]
    assert gaps[0] <= 0.2 + 0.5 and gaps[1] <= 0.4 + 0.5
    assert rows(db_url, "SELECT attempts FROM outbox.deliveries") == [(3,)]


def test_always_failing_goes_dead_after_max_attempts(db_url: str) -> None:
    with Receiver(default=Behaviour(status=500)) as rx:
        add_endpoint(db_url, rx.url + "/down", max_attempts=3)
        emit(db_url, 2)
        run_until(settings(db_url), lambda: states(db_url) == {"dead": 2})
    assert len(rx.received) == 6
    (row,) = set(rows(db_url, "SELECT attempts, last_status, last_error FROM outbox.deliveries"))
    assert row == (3, 500, "attempts exhausted (3/3): HTTP 500")


def test_client_error_is_dead_at_once(db_url: str) -> None:
    with Receiver(default=Behaviour(status=400, body=b'{"error":"bad field"}')) as rx:
        add_endpoint(db_url, rx.url + "/strict")
        emit(db_url, 1)
        drain(settings(db_url))
    assert len(rx.received) == 1
    assert rows(db_url, "SELECT state, attempts, last_status FROM outbox.deliveries") == [
        ("dead", 1, 400)]
    assert rows(db_url, "SELECT response_excerpt FROM outbox.delivery_attempts") == [
        ('{"error":"bad field"}',)]


def test_gone_kills_delivery_and_disables_endpoint(db_url: str) -> None:
    with Receiver(default=Behaviour(status=410)) as rx:
        endpoint = add_endpoint(db_url, rx.url + "/gone")
        emit(db_url, 1)
        drain(settings(db_url, concurrency=1))
        emit(db_url, 2)  # after disabling: no new deliveries are made
        drain(settings(db_url))
    assert len(rx.received) == 1
    assert states(db_url) == {"dead": 1}
    assert rows(db_url, "SELECT enabled, disabled_reason FROM outbox.endpoints WHERE id = %s",
                (endpoint,)) == [(False, "receiver answered 410 Gone")]


def test_slow_receiver_times_out_and_is_retried(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/slow", [Behaviour(delay=3.0), Behaviour(status=200)])
        add_endpoint(db_url, rx.url + "/slow")
        emit(db_url, 1)
        cfg = settings(db_url, http_timeout_seconds=0.5, lease_seconds=5.0)
        run_until(cfg, lambda: states(db_url) == {"delivered": 1})
    log = rows(db_url, "SELECT attempt, outcome, error_class FROM outbox.delivery_attempts"
                       " ORDER BY attempt")
    assert log == [(1, "retry", "timeout"), (2, "delivered", None)]


def test_late_result_of_expired_lease_is_fenced(db_url: str) -> None:
    add_endpoint(db_url, "http://127.0.0.1:9/unused")
    emit(db_url, 1)
    cfg = settings(db_url, lease_seconds=0.3, http_timeout_seconds=0.2)

    async def scenario() -> tuple[int, int, int]:
        store = Store(cfg)
        await store.open()
        try:
            (first,) = await store.claim(10)
            assert await store.claim(10) == []  # leased: invisible
            await asyncio.sleep(0.4)  # the lease expires
            (second,) = await store.claim(10)
            assert second.token != first.token and second.attempt == 2

            def result(job_token: object, attempt: int, state: str) -> Completion:
                return Completion(first.delivery_id, job_token, state, 0.0, 0,  # type: ignore[arg-type]
                                  200 if state == "delivered" else 500, None, state, attempt,
                                  1.0, None, None)

            late = await store.complete([result(first.token, 1, "delivered")])
            current = await store.complete([result(second.token, 2, "dead")])
            again = await store.complete([result(second.token, 2, "delivered")])
            return late, current, again
        finally:
            await store.close()

    assert asyncio.run(scenario()) == (0, 1, 0)
    assert rows(db_url, "SELECT state, attempts, last_status FROM outbox.deliveries") == [
        ("dead", 2, 500)]
    log = rows(db_url, "SELECT attempt, outcome FROM outbox.delivery_attempts ORDER BY id")
    assert log == [(1, "fenced"), (2, "dead"), (2, "fenced")]


@pytest.mark.slow
def test_disabled_endpoint_is_parked_not_sent(db_url: str) -> None:
    with Receiver() as rx:
        endpoint = add_endpoint(db_url, rx.url + "/paused")
        emit(db_url, 3)
        rows(db_url, "UPDATE outbox.endpoints SET enabled = false RETURNING id")
        drain(settings(db_url))
        assert rx.received == []
        assert rows(db_url, "SELECT state, attempts, visible_at = 'infinity'"
                            " FROM outbox.deliveries") == [("pending", 0, True)] * 3
        with psycopg.connect(db_url, autocommit=True) as c:
            ep.set_enabled(c, endpoint, True, schema="outbox")
        drain(settings(db_url))
        assert rx.wait_for(3, 5)
    assert states(db_url) == {"delivered": 3}


@pytest.mark.parametrize("bad", ["OUTBOX_HTTP_TIMEOUT_SECONDS=90", "OUTBOX_ALLOW_NETWORKS=nope"])
def test_bad_settings_refuse_to_start(db_url: str, bad: str) -> None:
    from tests.support.workers import log_of, spawn

    name, value = bad.split("=")
    proc = spawn(db_url, "--drain", **{name: value})
    proc.wait(timeout=60)
    err = log_of(proc)
    assert proc.returncode == 1
    assert err.startswith("error: invalid worker setting")
    assert "Traceback" not in err


def test_missing_schema_is_a_one_line_error(blank_db_url: str) -> None:
    from tests.support.workers import log_of, spawn

    proc = spawn(blank_db_url, "--drain")
    proc.wait(timeout=60)
    err = log_of(proc)
    assert proc.returncode == 1
    assert "run `outbox migrate`" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("host", ["127.0.0.1", "169.254.169.254", "[::1]", "10.1.2.3"])
def test_ip_literal_private_hosts_are_refused(db_url: str, host: str) -> None:
    """aiohttp skips its resolver for IP literals: the request hook must refuse them."""
    with Receiver() as rx:
        add_endpoint(db_url, f"http://{host}:{rx.port}/internal")
        emit(db_url, 1)
        drain(settings(db_url, allow_networks=""))
        assert rx.received == []
    ((state, error),) = rows(db_url, "SELECT state, last_error FROM outbox.deliveries")
    assert state == "dead"
    assert "is blocked" in error and "OUTBOX_ALLOW_NETWORKS" in error
    assert rows(db_url, "SELECT error_class FROM outbox.delivery_attempts") == [("ssrf",)]


def test_allowlisted_literal_is_delivered(db_url: str) -> None:
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/ok")
        emit(db_url, 1)
        drain(settings(db_url, allow_networks="127.0.0.1/32"))
        assert rx.wait_for(1, 5)
    assert states(db_url) == {"delivered": 1}
