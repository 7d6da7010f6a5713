"""One hanging endpoint cannot stall the others: in-flight cap, then the circuit breaker."""

from __future__ import annotations

import pytest

from outbox.testing.receiver import Receiver
from tests.support.hostile import Behaviour
from tests.support.workers import add_endpoint, emit, rows, run_until, settings

pytestmark = pytest.mark.slow  # waits for a hanging endpoint to time out


def test_hanging_endpoint_is_capped_then_broken(db_url: str) -> None:
    with Receiver() as rx:
        rx.script("/hang", [Behaviour(hang=True)])
        hanging = add_endpoint(db_url, rx.url + "/hang")
        healthy = [add_endpoint(db_url, f"{rx.url}/ok{i}") for i in range(3)]
        emit(db_url, 30)
        cfg = settings(db_url, concurrency=8, endpoint_max_in_flight=2, breaker_threshold=3,
                       breaker_cooldown_seconds=60, http_timeout_seconds=2.0,
                       lease_seconds=5.0)
        query = ("SELECT count(*) FROM outbox.deliveries WHERE state = 'delivered'"
                 " AND endpoint_id = ANY(%s)")
        pushed_q = ("SELECT count(*) FROM outbox.deliveries WHERE endpoint_id = %s"
                    " AND state = 'pending' AND visible_at > now() + interval '30 seconds'")

        def done() -> bool:
            return (rows(db_url, query, (healthy,)) == [(90,)]
                    and rows(db_url, pushed_q, (hanging,)) == [(30,)])

        run_until(cfg, done, timeout=60)
        hang_requests = sum(1 for r in rx.received if r.path == "/hang")
        # Order, not a clock: every healthy delivery was recorded no later than the first
        # hanging request timed out (same flush at worst). Without the cap, all 8 slots fill
        # with hanging requests and the healthy ones wait for that timeout.
        (healthy_last, hang_first), = rows(db_url, """
            SELECT (SELECT max(finished_at) FROM outbox.deliveries
                     WHERE endpoint_id = ANY(%s)),
                   (SELECT min(a.created_at) FROM outbox.delivery_attempts a
                      JOIN outbox.deliveries d ON d.id = a.delivery_id
                     WHERE d.endpoint_id = %s)""", (healthy, hanging))
    # 8 slots, but at most 2 ever wait on the hanging endpoint: the rest keep flowing
    assert healthy_last <= hang_first, "healthy endpoints waited for the hanging one"
    # two at a time until 3 consecutive failures open the breaker: then no more requests
    assert 3 <= hang_requests <= 6, f"{hang_requests} requests reached the hanging endpoint"
    # and run_until's condition proved the open breaker hid all 30 of its rows (>30 s ahead)
