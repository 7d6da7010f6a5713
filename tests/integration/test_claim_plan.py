"""The claim reads the partial index, so its cost follows the backlog, not the history."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from outbox.db import render
from outbox.delivery import queries
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, emit


def test_claim_plan_uses_the_partial_due_index(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "https://example.com/h")
    with psycopg.connect(db_url, autocommit=True) as c:
        # 50,000 finished rows of history and 20 pending: what a long-lived table looks like
        c.execute(
            "INSERT INTO outbox.events (id, type, payload)"
            " SELECT gen_random_uuid(), 'x', '{}' FROM generate_series(1, 50020)")
        c.execute(
            "INSERT INTO outbox.deliveries (event_id, endpoint_id, state, finished_at)"
            " SELECT id, %s, CASE WHEN row_number() OVER () <= 50000 THEN 'delivered'"
            " ELSE 'pending' END, now() FROM outbox.events", (endpoint,))
        c.execute("UPDATE outbox.deliveries SET finished_at = NULL WHERE state = 'pending'")
        c.execute("ANALYZE outbox.deliveries")
        claim = render(queries.CLAIM, SCHEMA)
        params = {"limit": 10, "lease": 30.0, "token": uuid.uuid4()}
        plan = "\n".join(r[0] for r in c.execute(("EXPLAIN " + claim).encode(), params))
        with c.transaction(force_rollback=True):
            claimed = c.execute(claim.encode(), params).fetchall()
    assert "Index Scan using deliveries_due on deliveries" in plan, plan
    # events were never analysed (stale statistics): still no scan of any whole table
    assert "Seq Scan" not in plan, plan
    assert len(claimed) == 10  # the MATERIALIZED CTE keeps the UPDATE to the LIMIT


def test_completion_plan_finds_rows_by_primary_key(db_url: str) -> None:
    """Completion must not walk the due index: its cost would grow with the backlog."""
    from outbox.delivery.jobs import Completion
    from outbox.delivery.store import _completion_params

    endpoint = add_endpoint(db_url, "https://example.com/h")
    backlog = ("WITH ev AS (INSERT INTO outbox.events (id, type, payload)"
               " SELECT gen_random_uuid(), 'x', '{}' FROM generate_series(1, %s) RETURNING id)"
               " INSERT INTO outbox.deliveries (event_id, endpoint_id) SELECT id, %s FROM ev")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(backlog, (20000, endpoint))
        c.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()")
        c.execute(backlog, (1000, endpoint))  # a backlog of 1,000 beside 20,000 of history
        c.execute("VACUUM ANALYZE outbox.deliveries")
        ids = [r[0] for r in c.execute(
            "SELECT id FROM outbox.deliveries WHERE state = 'pending' LIMIT 100")]
        done = [Completion(i, uuid.uuid4(), "delivered", 0.0, 0, 200, None, "delivered", 1,
                           1.0, None, None) for i in ids]
        complete = render(queries.COMPLETE, SCHEMA)
        with c.transaction(force_rollback=True):
            plan = "\n".join(r[0] for r in c.execute(
                ("EXPLAIN " + complete).encode(), _completion_params(done, "w")))
    assert "Index Scan using deliveries_pkey on deliveries d" in plan, plan
    assert "deliveries_due" not in plan, plan


def test_claim_rows_are_jobs_by_name(db_url: str) -> None:
    """The claim's columns are Job's fields; job_row refuses a result that is not a Job."""
    from outbox.delivery.jobs import Job
    from outbox.delivery.store import job_row
    from outbox.secretbox import SecretBox

    endpoint = add_endpoint(db_url, "https://example.com/h", headers={"X-Team": "billing"})
    (event,) = emit(db_url, 1, "x")

    async def claim(sql: str, params: dict[str, object]) -> list[Job]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as ac:
            cur = ac.cursor(row_factory=job_row(SecretBox()))
            return await (await cur.execute(sql.encode(), params)).fetchall()

    token = uuid.uuid4()
    params: dict[str, object] = {"limit": 10, "lease": 30.0, "token": token}
    (job,) = asyncio.run(claim(render(queries.CLAIM, SCHEMA), params))
    assert (job.token, job.attempt, job.event_id, job.event_type, job.endpoint_id) == (
        token, 1, event, "x", endpoint)
    assert (job.secret, job.previous_secret, job.headers) == (SECRET, None, {"X-Team": "billing"})
    with pytest.raises(TypeError, match="not Job's fields"):
        asyncio.run(claim("SELECT 1 AS delivery_id, 2 AS attempts", {}))
