"""Ordered delivery per key under failure: three worker processes, one of them
SIGKILLed mid-run, a receiver that answers 503 a fifth of the time."""

from __future__ import annotations

import pytest

from tests.acceptance.test_worker_processes import stop, workers
from tests.integration.test_ordered import ByEvent, emit_keyed
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, rows, states, wait_until

pytestmark = pytest.mark.slow  # worker processes, a SIGKILL, 2,000 events

KEYS = [f"order-{i}" for i in range(50)]
PER_KEY = 40  # 2,000 events


def test_per_key_order_survives_503s_and_a_sigkill(db_url: str) -> None:
    env = {"OUTBOX_CONCURRENCY": "20", "OUTBOX_LEASE_SECONDS": "3",
           "OUTBOX_HTTP_TIMEOUT_SECONDS": "2"}
    with ByEvent(flaky=0.2, seed=14) as rx:
        add_endpoint(db_url, rx.url + "/ordered", ordered=True)
        pairs = [(k, n) for n in range(PER_KEY) for k in KEYS]
        ids = emit_keyed(db_url, pairs[:1000])  # COPY path
        ids += emit_keyed(db_url, pairs[1000:1200], many=False)  # one statement each
        ids += emit_keyed(db_url, pairs[1200:])
        with workers(db_url, 3, **env) as procs:
            victim = procs[0]
            wait_until(lambda: len(rx.counts()) >= 600, 120, "a third delivered")
            victim.kill()  # SIGKILL: its leased heads come back after the lease
            victim.wait(10)
            assert rx.wait_for(2000, 240, distinct=True), len(rx.counts())
            wait_until(lambda: states(db_url) == {"delivered": 2000}, 60, "all recorded")
            for p in procs[1:]:
                stop(p)
    assert set(rx.counts()) == {str(i) for i in ids}  # nothing lost
    for k in KEYS:
        assert rx.sequence(k) == list(range(PER_KEY)), (k, rx.sequence(k))
    # every retry went to the key's head: no event was attempted before its predecessor
    # was recorded delivered (a redelivery after the kill may repeat an event, never skip)
    assert rows(db_url, f"SELECT count(*) FROM {SCHEMA}.deliveries WHERE key IS NULL") == [(0,)]
