"""The claim rotates over endpoints: a burst for one cannot starve the others' rows."""

from __future__ import annotations

import uuid
import weakref
from collections import Counter
from typing import Any

import psycopg

from outbox._db.connection import render
from outbox.delivery import queries
from tests.support.pg import SCHEMA, UNBUDGETED, claimed_rows

CLAIM = render(queries.CLAIM, SCHEMA).encode()
ENDPOINT_COLUMN = 7  # endpoint_id in the claim's result


def _endpoints(c: psycopg.Connection[Any], n: int) -> list[uuid.UUID]:
    return [r[0] for r in c.execute(
        "INSERT INTO outbox.endpoints (id, url, secret) SELECT gen_random_uuid(),"
        " 'https://example.com/' || g, 'x' FROM generate_series(1, %s) g RETURNING id", (n,))]


def _due(c: psycopg.Connection[Any], endpoint: uuid.UUID, n: int, age_s: float) -> None:
    """``n`` due deliveries for ``endpoint``, due since about ``age_s`` seconds."""
    c.execute("""
        WITH ev AS (INSERT INTO outbox.events (id, type, payload)
                    SELECT gen_random_uuid(), 'x', '{}' FROM generate_series(1, %(n)s)
                    RETURNING id)
        INSERT INTO outbox.deliveries (event_id, endpoint_id, visible_at)
        SELECT id, %(ep)s, now() - make_interval(secs => %(age)s) FROM ev""",
              {"n": n, "ep": endpoint, "age": age_s})


# the rotation position per connection, as a worker carries it between claims
_POSITION: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _claim(c: psycopg.Connection[Any], limit: int, **budget: Any) -> list[tuple[Any, ...]]:
    """One claim as the worker makes it: the rotation's position passed in, and read back
    from the result (every row carries it; an empty claim's one row holds it alone)."""
    with c.transaction():
        cur = c.execute(CLAIM, {"limit": limit, "lease": 30.0, "token": uuid.uuid4(),
                                **UNBUDGETED, "after": _POSITION.get(c), **budget})
        rows = cur.fetchall()
    names = [d.name for d in cur.description or ()]
    _POSITION[c] = rows[0][names.index(queries.CLAIM_POSITION)] if rows else None
    return claimed_rows(rows)


def test_quiet_endpoint_is_claimed_at_once_behind_a_burst(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        burst, quiet = _endpoints(c, 2)
        _due(c, burst, 3000, age_s=60)  # older than the quiet endpoint's rows
        _due(c, quiet, 5, age_s=1)
        c.execute("ANALYZE outbox.deliveries")
        first = Counter(r[ENDPOINT_COLUMN] for r in _claim(c, 10))
        # a global FIFO would hand all 10 to the burst; the rotation gives the quiet one 5
        assert first == {burst: 5, quiet: 5}
        # alone, the burst gets the whole claim (the FIFO fill), not just its share
        assert Counter(r[ENDPOINT_COLUMN] for r in _claim(c, 100)) == {burst: 100}


def test_every_endpoint_is_visited_when_there_are_more_than_the_limit(db_url: str) -> None:
    """30 endpoints with due rows, claims of 10: each claim moves the rotation on, so
    three claims reach all of them, and no row is claimed twice."""
    with psycopg.connect(db_url, autocommit=True) as c:
        endpoints = _endpoints(c, 30)
        for i, endpoint in enumerate(endpoints):
            _due(c, endpoint, 3, age_s=100 - i)
        seen: list[tuple[Any, ...]] = []
        for _ in range(3):
            rows = _claim(c, 10)
            assert len(rows) == 10
            seen += rows
    assert {r[ENDPOINT_COLUMN] for r in seen} == set(endpoints)
    assert len({r[0] for r in seen}) == 30  # distinct deliveries


def test_concurrent_claims_never_take_the_same_row(db_url: str) -> None:
    """Two open claims (SKIP LOCKED) over the same endpoints get disjoint rows, and the
    second still gets a full claim (the ring and the fill both skip the locked rows)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        a, b = _endpoints(c, 2)
        _due(c, a, 50, age_s=60)
        _due(c, b, 50, age_s=30)
    with psycopg.connect(db_url) as one, psycopg.connect(db_url) as two:
        first = {r[0] for r in _claim(one, 30)}
        second = {r[0] for r in _claim(two, 30)}
        one.rollback()
        two.rollback()
    assert len(first) == len(second) == 30
    assert not first & second


def test_a_crowd_of_retry_only_endpoints_does_not_hide_a_due_one(db_url: str) -> None:
    """300 endpoints whose only rows are scheduled retries (an hour ahead), a burst and a
    quiet endpoint (random ids: anywhere in the ring): a busy worker's small claims
    (limit 2) reach the quiet one within four claims, because the ring passes over
    endpoints with nothing due (up to greatest(4 * limit, 100) a claim); stopping after
    `limit` endpoints, as it once did, takes about 150 claims."""
    with psycopg.connect(db_url, autocommit=True) as c:
        retrying = _endpoints(c, 300)
        for endpoint in retrying:
            _due(c, endpoint, 1, age_s=-3600)
        burst, quiet = _endpoints(c, 2)
        _due(c, burst, 500, age_s=60)
        _due(c, quiet, 1, age_s=1)
        c.execute("ANALYZE outbox.deliveries")
        seen = [r[ENDPOINT_COLUMN] for _ in range(4) for r in _claim(c, 2)]
    assert quiet in seen
    assert set(seen) <= {burst, quiet}  # nothing that is not due


def test_a_claim_that_takes_nothing_still_moves_the_rotation_on(db_url: str) -> None:
    """150 endpoints with only future rows below a due one (the highest id), and a burst
    whose older rows fill the FIFO but whose budget is spent (every slot in flight here):
    the first claim's ring passes 100 endpoints and takes nothing, and its result still
    carries where it stopped, so the next claim goes on from there and reaches the due
    endpoint (starting from the lowest id again, every claim would take nothing)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        for endpoint in _endpoints(c, 150):
            _due(c, endpoint, 1, age_s=-3600)
        (burst,) = _endpoints(c, 1)
        (last,) = c.execute("INSERT INTO outbox.endpoints (id, url, secret) VALUES"
                            " ('ffffffff-ffff-ffff-ffff-fffffffffffe', 'https://example.com/q',"
                            " 'x') RETURNING id").fetchone() or (None,)
        _due(c, burst, 100, age_s=60)
        _due(c, last, 1, age_s=1)
        c.execute("ANALYZE outbox.deliveries")
        spent = {"used_ids": [burst], "used_counts": [1 << 30]}
        assert _claim(c, 2, **spent) == []
        assert _POSITION.get(c) is not None
        assert [r[ENDPOINT_COLUMN] for r in _claim(c, 2, **spent)] == [last]
