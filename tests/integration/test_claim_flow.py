"""The claim's per-endpoint budgets: free slots of this process, and the send tokens of a
rate-limited endpoint shared by every claim (delivery/queries/claim.py BUDGET)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest

from outbox._db.connection import render
from outbox.delivery import queries
from tests.support.pg import SCHEMA, UNBUDGETED, claimed_rows
from tests.support.workers import add_endpoint

CLAIM = render(queries.CLAIM, SCHEMA).encode()
ENDPOINT_COLUMN = 7


def _due(c: psycopg.Connection[Any], endpoint: uuid.UUID, n: int) -> None:
    c.execute("""
        WITH ev AS (INSERT INTO outbox.events (id, type, payload)
                    SELECT gen_random_uuid(), 'x', '{}' FROM generate_series(1, %(n)s)
                    RETURNING id)
        INSERT INTO outbox.deliveries (event_id, endpoint_id, visible_at)
        SELECT id, %(ep)s, now() - interval '1 second' FROM ev""", {"n": n, "ep": endpoint})


def _claim(c: psycopg.Connection[Any], limit: int, **budget: Any) -> Counter[Any]:
    """The claim's endpoints and row counts; in-flight counts sorted by id, as the store
    passes them (BUDGET finds them by binary search)."""
    if budget.get("used_ids"):
        pairs = sorted(zip(budget["used_ids"], budget["used_counts"], strict=True),
                       key=lambda p: p[0].int)
        budget["used_ids"], budget["used_counts"] = map(list, zip(*pairs, strict=True))
    params = {"limit": limit, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED, **budget}
    return Counter(r[ENDPOINT_COLUMN] for r in claimed_rows(c.execute(CLAIM, params).fetchall()))


def test_the_claim_takes_no_more_than_the_free_slots(db_url: str) -> None:
    """Cap 25 (the default cap passed), 10 in flight here: 15 of the hot endpoint, and the
    FIFO fill does not add more of it; another endpoint's cap is its own."""
    hot = add_endpoint(db_url, "http://127.0.0.1:9/hot")
    capped = add_endpoint(db_url, "http://127.0.0.1:9/capped", max_in_flight=3)
    with psycopg.connect(db_url, autocommit=True) as c:
        _due(c, hot, 200)
        _due(c, capped, 50)
        got = _claim(c, 100, default_cap=25, used_ids=[hot], used_counts=[10])
        assert got == {hot: 15, capped: 3}
        # at its cap here: none of it, whatever the limit
        assert _claim(c, 100, default_cap=25, used_ids=[hot, capped],
                      used_counts=[25, 1 << 30]) == {}


def test_a_rate_limit_is_shared_by_every_claim(db_url: str) -> None:
    """10/s, burst 10: the first claim takes the burst, the next ones (other connections:
    other processes) only what refilled since; a claim that finds the bucket locked by an
    open claim takes nothing of the endpoint, and the unlimited endpoint is unaffected."""
    limited = add_endpoint(db_url, "http://127.0.0.1:9/limited", rate_limit=10,
                           rate_burst=10)
    free = add_endpoint(db_url, "http://127.0.0.1:9/free")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.endpoint_flow SET refilled_at = now() - interval '1 hour'")
        _due(c, limited, 100)
        _due(c, free, 100)
    with psycopg.connect(db_url) as one, psycopg.connect(db_url, autocommit=True) as two:
        first = _claim(one, 50)  # open transaction: holds the bucket's row
        second = _claim(two, 50)
        one.commit()
        third = _claim(two, 50)
    assert first[limited] == 10
    assert second[limited] == 0 and second[free] > 0
    assert third[limited] <= 1  # refilled at 10/s for the few ms since
    with psycopg.connect(db_url) as c:
        (tokens,), = c.execute("SELECT tokens FROM outbox.endpoint_flow WHERE endpoint_id"
                               " = %s", (limited,)).fetchall()
    assert 0 <= tokens < 1


def test_a_paused_endpoint_is_not_claimed(db_url: str) -> None:
    paused = add_endpoint(db_url, "http://127.0.0.1:9/paused")
    with psycopg.connect(db_url, autocommit=True) as c:
        _due(c, paused, 10)
        c.execute("UPDATE outbox.endpoint_flow SET paused_until = now() + interval '1 minute'")
        assert _claim(c, 10) == {}
        c.execute("UPDATE outbox.endpoint_flow SET paused_until = now()")
        assert _claim(c, 10) == {paused: 10}


def test_throttle_cuts_once_per_congestion_event(db_url: str) -> None:
    """A 429 cuts the rate to 0.7x; another 429 answering a request admitted before that
    cut (claimed under the old rate) does not cut again, nor one within a second of it;
    one admitted after it, a second later, does. A Retry-After pause
    empties the bucket until the pause's end."""
    import time

    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/gw", rate_limit=100)

    def throttle(c: psycopg.Connection[Any], admitted_at: float, pause: float = 0.0) -> int:
        return _throttle(c, endpoint, admitted_at, pause=pause)

    def state(c: psycopg.Connection[Any]) -> tuple[Any, ...]:
        row = c.execute("SELECT adaptive_rate, throttled_total, paused_until > now(), tokens"
                        " FROM outbox.endpoint_flow WHERE endpoint_id = %s",
                        (endpoint,)).fetchone()
        assert row is not None
        return tuple(row)

    with psycopg.connect(db_url, autocommit=True) as c:
        before = time.time() - 5
        assert throttle(c, before) == 1
        assert state(c)[:2] == (70.0, 1)  # 0.7 x the fixed limit in force
        assert throttle(c, time.time() + 1) == 0  # admitted after it, but within a second
        c.execute("UPDATE outbox.endpoint_flow SET decreased_at = now() - interval '1 s'")
        assert throttle(c, before) == 0  # sent before the cut: same congestion event
        assert state(c)[:2] == (70.0, 1)
        assert throttle(c, time.time() + 1, pause=2.0) == 1
        rate, total, paused, tokens = state(c)
        assert rate < 70.0  # cut again: 0.7 x (70 grown for about a second)
        assert total == 2 and paused and tokens == 0


def _throttle(c: psycopg.Connection[Any], endpoint: Any, admitted_at: float, *,
              observed: float = 500.0, pause: float = 0.0) -> int:
    from outbox.delivery.throttle import DECREASE, INCREASE, SLOW_START

    return c.execute(render(queries.THROTTLE, SCHEMA).encode(),
                     {"endpoint": endpoint, "observed": observed, "pause": pause,
                      "admitted_at": admitted_at, "decrease": DECREASE,
                      "increase": INCREASE, "slow_start": SLOW_START}).rowcount


def test_a_first_cut_from_one_process_share_grows_back_by_slow_start(db_url: str) -> None:
    """With no rate in force, the first cut starts from what the reporting process saw (its
    share only) and the rate then grows 1.5x a second, up to 10x; the next cut, from that
    rate in force, grows back linearly. The allowed-rate gauge and `endpoints show` read
    the same rate (one formula, as the claim's budget)."""
    import time

    from outbox.admin.flow import state

    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/gw")
    with psycopg.connect(db_url, autocommit=True) as c:
        assert _throttle(c, endpoint, time.time() - 5, observed=40.0) == 1
        c.execute("UPDATE outbox.endpoint_flow SET decreased_at = now() - interval '2 s'")
        gauges: dict[Any, float] = dict(
            c.execute(render(queries.FLOW_GAUGES, SCHEMA).encode()).fetchall())
        assert 28.0 * 1.5 ** 2 - 0.1 < gauges[endpoint] < 28.0 * 1.5 ** 2.1  # 63: 28 x 1.5^2
        shown = state(c, endpoint, schema=SCHEMA).allowed_rate
        assert shown is not None and abs(shown - gauges[endpoint]) < 1
        c.execute("UPDATE outbox.endpoint_flow SET decreased_at = now() - interval '10 s'")
        capped: dict[Any, float] = dict(
            c.execute(render(queries.FLOW_GAUGES, SCHEMA).encode()).fetchall())
        assert capped[endpoint] == pytest.approx(280.0)  # 10x the cut, not 28 x 1.5^10
        c.execute("UPDATE outbox.endpoint_flow SET decreased_at = now() - interval '2 s'")
        assert _throttle(c, endpoint, time.time() + 1, observed=40.0) == 1  # from 63, not 40
        rate, growth, increase = c.execute(
            "SELECT adaptive_rate, growth, increase_per_second FROM outbox.endpoint_flow"
            " WHERE endpoint_id = %s", (endpoint,)).fetchone() or ()
        assert 0.7 * 63 - 0.1 < rate < 0.7 * 28.0 * 1.5 ** 2.1 and growth is None
        assert increase == pytest.approx(0.07 * rate)


def test_flow_gauges_list_only_flow_controlled_endpoints(db_url: str) -> None:
    """The allowed-rate gauge's query: a fixed limit, a throttled endpoint (its adaptive
    rate), a paused one (-1); an unlimited, unthrottled endpoint is not listed."""
    limited = add_endpoint(db_url, "http://127.0.0.1:9/limited", rate_limit=30)
    throttled = add_endpoint(db_url, "http://127.0.0.1:9/throttled")
    paused = add_endpoint(db_url, "http://127.0.0.1:9/paused")
    add_endpoint(db_url, "http://127.0.0.1:9/free")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.endpoint_flow SET adaptive_rate = 12, decreased_at = now()"
                  " WHERE endpoint_id = %s", (throttled,))
        c.execute("UPDATE outbox.endpoint_flow SET paused_until = now() + interval '1 min'"
                  " WHERE endpoint_id = %s", (paused,))
        got: dict[Any, Any] = dict(
            c.execute(render(queries.FLOW_GAUGES, SCHEMA).encode()).fetchall())
    assert got == {limited: 30.0, throttled: 12.0, paused: -1}


def test_the_claim_is_shared_by_what_each_endpoint_can_spend(db_url: str) -> None:
    """The ring splits a claim among the due endpoints like water: a rate-limited endpoint
    with 3 tokens takes 3 and leaves the rest of its share to the others; one with none
    left, or whose slots here are all busy, takes nothing (its older backlog also fills
    the FIFO's candidates, so the others get the whole claim only through the ring)."""
    limited = add_endpoint(db_url, "http://127.0.0.1:9/limited", rate_limit=10)
    free = add_endpoint(db_url, "http://127.0.0.1:9/free")
    busy = add_endpoint(db_url, "http://127.0.0.1:9/busy")

    def tokens(c: psycopg.Connection[Any], n: int) -> None:  # no refill while the test runs
        c.execute("UPDATE outbox.endpoint_flow SET tokens = %s,"
                  " refilled_at = now() + interval '1 hour'", (n,))

    with psycopg.connect(db_url, autocommit=True) as c:
        _due(c, limited, 200)
        _due(c, busy, 200)
        c.execute("UPDATE outbox.deliveries SET visible_at = now() - interval '1 minute'")
        _due(c, free, 200)
        tokens(c, 0)
        assert _claim(c, 40, default_cap=100, used_ids=[busy], used_counts=[100]) \
            == {free: 40}
        tokens(c, 3)
        assert _claim(c, 40, default_cap=100, used_ids=[busy], used_counts=[100]) \
            == {free: 37, limited: 3}
        tokens(c, 3)  # three endpoints: the ring 3 + 18 + 18 (the level: 37 // 2), the fill 1
        got = _claim(c, 40)
        assert got[limited] == 3 and min(got[busy], got[free]) >= 18
        assert sum(got.values()) == 40


def test_a_limited_endpoint_spends_a_tenth_of_a_second_of_tokens_at_a_time(
        db_url: str) -> None:
    """At 50/s a claim takes none of the endpoint's rows before 5 tokens (0.1 s) have
    accumulated, then all it has: its sends go in fives, not one per claim. The tokens not
    spent stay; with a burst under twice that, half the burst is (here 1: tokens stop at
    the burst, and a chunk of the whole burst could be taken only as it fills). While an adaptive
    rate applies, tokens go one at a time (its burst is a tenth already)."""
    fifty = add_endpoint(db_url, "http://127.0.0.1:9/fifty", rate_limit=50)
    narrow = add_endpoint(db_url, "http://127.0.0.1:9/narrow", rate_limit=50, rate_burst=2)

    def tokens(c: psycopg.Connection[Any], endpoint: uuid.UUID, n: float) -> None:
        c.execute("UPDATE outbox.endpoint_flow SET tokens = %s,"
                  " refilled_at = now() + interval '1 hour' WHERE endpoint_id = %s",
                  (n, endpoint))

    with psycopg.connect(db_url, autocommit=True) as c:
        _due(c, fifty, 50)
        _due(c, narrow, 50)
        tokens(c, fifty, 4.5)
        tokens(c, narrow, 1.0)
        assert _claim(c, 40) == {narrow: 1}
        left = c.execute("SELECT tokens FROM outbox.endpoint_flow WHERE endpoint_id = %s",
                         (fifty,)).fetchone()
        assert left is not None and left[0] == 4.5  # kept for the next claim
        tokens(c, fifty, 5.0)
        tokens(c, narrow, 2.0)
        assert _claim(c, 40) == {fifty: 5, narrow: 2}
        c.execute("UPDATE outbox.endpoint_flow SET adaptive_rate = 50, decreased_at = now(),"
                  " increase_per_second = 0 WHERE endpoint_id = %s", (fifty,))
        tokens(c, fifty, 1.0)
        assert _claim(c, 40) == {fifty: 1}  # throttled: one token at a time, as it comes


def test_the_store_finds_each_endpoints_count_among_many_in_any_order(db_url: str) -> None:
    """The claim looks an endpoint's in-flight count up by binary search over ids the store
    sorts: 40 endpoints given in a shuffled order, each with 0-4 in flight against a cap
    of 4, get exactly their free slots; an endpoint listed blocked gets none."""
    import asyncio
    import random

    from outbox.delivery.fairness import BLOCKED
    from outbox.delivery.store import Store
    from tests.support.workers import settings

    endpoints = [add_endpoint(db_url, f"http://127.0.0.1:9/e{i}") for i in range(40)]
    with psycopg.connect(db_url, autocommit=True) as c:
        for e in endpoints:
            _due(c, e, 6)
    used = {e: i % 5 for i, e in enumerate(endpoints)}
    used[endpoints[7]] = BLOCKED
    order = list(used)
    random.Random(7).shuffle(order)

    async def claim() -> Counter[Any]:
        store = Store(settings(db_url, endpoint_max_in_flight=4), pool_size=1)
        try:
            jobs = await store.claim(200, order, [used[e] for e in order])
        finally:
            await store.close()
        return Counter(j.endpoint_id for j in jobs)

    got = asyncio.run(claim())
    assert got == {e: 4 - n for e, n in used.items() if n < 4}


def test_listing_only_the_endpoints_that_could_bind_claims_the_same(db_url: str) -> None:
    """The gate lists an in-flight endpoint only while its free slots are fewer than the
    claim's size (EndpointGate.claim_budgets(limit)); the claim then takes exactly what it
    takes with every in-flight count listed, for claim sizes below, at and above the free
    slots of the endpoints, own caps included."""
    import random

    from outbox.delivery.fairness import EndpointGate

    rng = random.Random(11)
    caps = [None, None, 3, 12, None, 6, None, 20] * 3
    endpoints = [add_endpoint(db_url, f"http://127.0.0.1:9/b{i}", max_in_flight=cap)
                 for i, cap in enumerate(caps)]
    gate = EndpointGate(default_cap=8, threshold=5, cooldown=10.0)
    for e, cap in zip(endpoints, caps, strict=True):
        for _ in range(rng.randint(0, cap or 8)):
            assert gate.admit(e, cap) is None
    with psycopg.connect(db_url, autocommit=True) as c:
        for e in endpoints:
            _due(c, e, 25)
    with psycopg.connect(db_url) as c:
        for limit in (2, 5, 9, 40, 200):
            full = _claim(c, limit, default_cap=8, **dict(zip(
                ("used_ids", "used_counts"), gate.claim_budgets(), strict=True)))
            c.rollback()
            short_ids, short_counts = gate.claim_budgets(limit)
            if limit <= 5:  # some endpoints' free slots could not bind a claim this size
                assert len(short_ids) < len(gate.claim_budgets()[0])
            short = _claim(c, limit, default_cap=8, used_ids=short_ids,
                           used_counts=short_counts)
            c.rollback()
            assert short == full, limit
