"""The claim runs on a generic plan (made once per connection) while the partitions are
few and statements are prepared; otherwise PostgreSQL chooses (delivery/queries/claim.py
GENERIC_PLAN). The claims are the same either way."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from outbox.delivery import store as store_module
from outbox.delivery.store import Store
from tests.support.workers import add_endpoint, settings

PLANS = ("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
         " WHERE statement LIKE '%WITH RECURSIVE ring%'")


def _due(db_url: str, n: int) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/hook")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("""
            WITH ev AS (INSERT INTO outbox.events (id, type, payload)
                        SELECT gen_random_uuid(), 'x', '{}' FROM generate_series(1, %(n)s)
                        RETURNING id)
            INSERT INTO outbox.deliveries (event_id, endpoint_id, visible_at)
            SELECT id, %(ep)s, now() - interval '1 second' FROM ev""",
                  {"n": n, "ep": endpoint})


def _claims(db_url: str, **overrides: Any) -> tuple[int, tuple[int, int]]:
    """Ten claims of 5 on one connection, the floor read before each: (rows claimed, the
    claim's (generic, custom) plan counts on that connection: of its prepared statement
    that ran most; psycopg prepares one per parameter types, and the first claim's
    rotation position is NULL)."""
    async def main() -> tuple[int, tuple[int, int]]:
        store = Store(settings(db_url, **overrides), pool_size=1)
        claimed = 0
        for _ in range(10):
            claimed += len(await store.claim(5))
            store._floor_read_at = -store_module.FLOOR_EVERY  # read each time
        async with store.connections.connection() as conn:
            cur = await conn.execute(PLANS)
            plans = [(int(g), int(c)) for g, c in await cur.fetchall()]
        await store.close()
        return claimed, max(plans, key=sum)

    return asyncio.run(main())


def test_few_partitions_and_prepared_statements_give_the_claim_a_generic_plan(
        db_url: str) -> None:
    _due(db_url, 100)
    claimed, (generic, custom) = _claims(db_url, prepare_threshold=0)
    assert claimed == 50
    assert generic >= 8 and custom <= 1


def test_many_partitions_leave_the_plan_to_postgresql(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "GENERIC_PLAN_MAX_PARTITIONS", 0)
    _due(db_url, 100)
    claimed, (_generic, custom) = _claims(db_url, prepare_threshold=0)
    assert claimed == 50
    assert custom >= 5  # PostgreSQL's choice: custom plans for the first five at least


def test_unprepared_statements_are_left_to_postgresql(db_url: str) -> None:
    """With OUTBOX_PREPARE_THRESHOLD=none (a pooler), a generic plan would be made anew for
    every claim: the claim is not asked for one."""
    _due(db_url, 100)

    async def main() -> bool:
        store = Store(settings(db_url, prepare_threshold=None), pool_size=1)
        await store.claim(5)
        await store.claim(5)
        generic = store._generic_claim
        await store.close()
        return generic

    assert asyncio.run(main()) is False
