"""Flow control with real worker processes: a fixed rate limit holds across processes,
429s slow an endpoint down for every worker and it recovers, Retry-After pauses the whole
endpoint, ordered keys stay in order while throttled."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import outbox
from bench.limited import LimitedReceiver
from outbox.admin import flow
from tests.support.pg import SCHEMA
from tests.support.workers import FAST, add_endpoint, emit, log_of, spawn, states, wait_until

pytestmark = pytest.mark.slow  # worker processes, seconds of rate-limited sending


@contextmanager
def workers(db_url: str, n: int, **env: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [spawn(db_url, **{**FAST, "OUTBOX_RETRY_CAP_SECONDS": "3", **env})
             for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)


def _max_in_any_second(times: list[float]) -> int:
    """The most requests that arrived within any one second (a sliding window)."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def _flow(db_url: str, endpoint: object) -> flow.FlowState:
    with psycopg.connect(db_url) as c:
        return flow.state(c, str(endpoint), schema=SCHEMA)


def test_a_rate_limit_holds_across_processes(db_url: str) -> None:
    """20/s, burst 20, three processes: about 20/s, and never more than 40 claimed in any
    second (tests/integration/test_claim_flow.py proves the claims exact); arrivals at the
    receiver may bunch up by the spread between claim and arrival on a loaded machine
    (process start, first connections): 20% allowed for that."""
    with LimitedReceiver() as rx:
        add_endpoint(db_url, rx.url + "/limited", rate_limit=20, rate_burst=20)
        emit(db_url, 200)
        with workers(db_url, 3) as procs:
            wait_until(lambda: len(rx.delivered()) >= 200, 60, "200 delivered")
            for p in procs:
                assert p.poll() is None, log_of(p)[-2000:]
        times = [h.at for h in rx.hits]
    assert len(times) == 200  # 200s only: nothing retried
    assert _max_in_any_second(times) <= 48
    span = max(times) - min(times)
    assert (200 - 20) / span <= 20 * 1.1, span  # the burst, then 20/s at most
    assert (200 - 20) / span >= 20 * 0.7, span  # and not far below it


def test_429s_slow_the_endpoint_down_for_every_worker_then_it_recovers(db_url: str) -> None:
    """A receiver that answers 429 above 40 requests a second, two processes at default
    settings (hundreds a second otherwise): after the first seconds under 15% of the
    answers are 429s; once the receiver stops limiting, the allowed rate grows back."""
    with LimitedReceiver(limit=40) as rx:
        endpoint = add_endpoint(db_url, rx.url + "/gateway")
        emit(db_url, 500)
        with workers(db_url, 2):
            start = time.monotonic()
            wait_until(lambda: len(rx.delivered()) >= 500, 90, "500 delivered")
            end = time.monotonic()
            throttled = _flow(db_url, endpoint)
            assert throttled.throttled and throttled.allowed_rate is not None
            assert throttled.throttled_total >= 1
            later = [h for h in rx.hits if h.at >= start + 5]
            share = sum(h.status == 429 for h in later) / max(len(later), 1)
            assert share < 0.15, (share, rx.per_second(start, end, 429))
            rx.limit = None  # the receiver recovers
            emit(db_url, 400)
            wait_until(lambda: len(rx.delivered()) >= 900, 90, "the next 400 delivered")
            recovered = _flow(db_url, endpoint)
    assert recovered.allowed_rate is None or recovered.allowed_rate > throttled.allowed_rate
    assert states(db_url) == {"delivered": 900}


def test_retry_after_pauses_the_whole_endpoint(db_url: str) -> None:
    """The first answer is 429 with Retry-After: 2. Requests already on their way may
    still arrive; then nothing for the pause, from any process, then the rest."""
    with LimitedReceiver(first_pause=2) as rx:
        endpoint = add_endpoint(db_url, rx.url + "/paused", rate_limit=50)
        emit(db_url, 150)
        with workers(db_url, 2):
            wait_until(lambda: len(rx.delivered()) >= 150, 60, "150 delivered")
        first = rx.hits[0]
        assert first.status == 429
        during = [h for h in rx.hits if first.at + 0.3 < h.at < first.at + 1.8]
    assert during == [], [round(h.at - first.at, 2) for h in during]
    assert _flow(db_url, endpoint).throttled_total >= 1


def test_ordered_keys_stay_in_order_while_throttled(db_url: str) -> None:
    """An ordered endpoint behind a 429-above-30/s gateway with Retry-After: 1: each key's
    events arrive (as 200s) in emit order."""
    keys = [f"k{i}" for i in range(6)]
    per_key = 40
    with LimitedReceiver(limit=30, retry_after="1") as rx:
        add_endpoint(db_url, rx.url + "/ordered", ordered=True)
        with psycopg.connect(db_url) as c:
            outbox.emit_many(c, [outbox.Event("order.changed", {"key": k, "n": n}, key=k)
                                 for n in range(per_key) for k in keys])
            c.commit()
        with workers(db_url, 2):
            wait_until(lambda: len(rx.delivered()) >= per_key * len(keys), 120,
                       "every keyed event delivered")
        got = rx.delivered()
    assert any(h.status == 429 for h in rx.hits)  # it was throttled
    for k in keys:
        seq = [h.body["n"] for h in got if h.body.get("key") == k]
        assert seq == list(range(per_key)), (k, seq)
