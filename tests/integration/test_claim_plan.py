"""The claim reads the partial indexes, so its cost follows the claim, not the history,
the backlog or the number of endpoints."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import uuid
from typing import Any

import psycopg
import pytest

from outbox._db.connection import render
from outbox.delivery import queries
from tests.support.pg import SCHEMA, UNBUDGETED
from tests.support.workers import SECRET, add_endpoint, emit

# deliveries is partitioned (migrations/0018): its partitions are deliveries_p<k> and
# deliveries_legacy; a scan of an empty one (an ahead partition: cost 0.00..0.00) is free.
SCANS = re.compile(r"(Seq Scan|Bitmap Heap Scan) on (deliveries\w*|events\w*|endpoints)\b"
                   r"(?!.*cost=0\.00\.\.0\.00 )")


def _crowded_queue(c: psycopg.Connection[Any]) -> uuid.UUID:
    """5,000 endpoints with a pending row not yet due (a retry), 50,000 delivered rows of
    history spread over them, and one endpoint with 20 due rows: what a long-lived,
    many-tenant table looks like. Only deliveries is analysed (stale statistics elsewhere)."""
    c.execute("INSERT INTO outbox.endpoints (id, url, secret)"
              " SELECT gen_random_uuid(), 'https://example.com/' || g, 'x'"
              " FROM generate_series(0, 5000) g")
    c.execute("INSERT INTO outbox.events (id, type, payload)"
              " SELECT gen_random_uuid(), 'x', '{}' FROM generate_series(1, 55020)")
    c.execute("""
        WITH e AS (SELECT id, row_number() OVER () AS i FROM outbox.events),
             p AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS j FROM outbox.endpoints)
        INSERT INTO outbox.deliveries (event_id, endpoint_id, state, visible_at, finished_at)
        SELECT e.id, p.id, CASE WHEN e.i <= 50000 THEN 'delivered' ELSE 'pending' END,
               CASE WHEN e.i <= 55000 THEN now() + interval '1 hour'
                    ELSE now() - interval '1 minute' END,
               CASE WHEN e.i <= 50000 THEN now() END
          FROM e JOIN p ON p.j = CASE WHEN e.i <= 55000 THEN e.i % 5000 ELSE 5000 END""")
    c.execute("ANALYZE outbox.deliveries")
    row = c.execute("SELECT endpoint_id FROM outbox.deliveries WHERE visible_at < now()"
                    " LIMIT 1").fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _plan(c: psycopg.Connection[Any], options: str = "") -> str:
    claim = render(queries.CLAIM, SCHEMA)
    params = {"limit": 10, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED}
    with c.transaction(force_rollback=True):
        rows = c.execute((f"EXPLAIN {options} " + claim).encode(), params).fetchall()
    return "\n".join(r[0] for r in rows)


def test_claim_plan_uses_the_partial_indexes(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        due_endpoint = _crowded_queue(c)
        plan = _plan(c)
        analyzed = _plan(c, "(ANALYZE, BUFFERS, TIMING OFF)")
        claim = render(queries.CLAIM, SCHEMA)
        params = {"limit": 10, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED}
        with c.transaction(force_rollback=True):
            claimed = c.execute(claim.encode(), params).fetchall()
    # the rotation: a skip scan over the endpoints with pending rows, then each one's due rows
    # (each partition's own index: deliveries_p<k>_<the parent index's name>)
    part = r"deliveries_(p\d+|legacy)"
    # (the ring's steps also read the id for the claim floor: index scans, not index-only)
    assert re.search(f"Index Scan using {part}_pending_by_endpoint on {part}", plan), plan
    assert re.search(f"Index Scan using {part}_due on {part}", plan), plan  # the FIFO fill
    assert re.search(f"Index Scan using {part}_pkey on {part} d", plan), plan  # the UPDATE
    # (events is partitioned too: each claimed row's event by its partition's primary key)
    assert re.search(r"Index Scan using events_\w+_pkey on events_\w+", plan), plan
    assert "Index Scan using endpoints_pkey" in plan
    # events and endpoints were never analysed (stale statistics): still no scan of any table
    assert not SCANS.findall(plan), plan
    # the rotation visits at most greatest(4 * limit, 100) of the 5,001 endpoints with
    # pending rows (most hold only future rows here)
    ring = re.search(r"Recursive Union .*actual rows=(\d+) loops=1", analyzed)
    assert ring is not None and int(ring.group(1)) <= 100, analyzed
    # the MATERIALIZED CTEs keep the UPDATE to the LIMIT, and the fill finds the due rows
    assert len(claimed) == 10
    assert {r[7] for r in claimed} == {due_endpoint}


def test_the_generic_claim_plan_uses_the_partial_indexes_too(db_url: str) -> None:
    """The worker claims on a generic plan (queries.GENERIC_PLAN: made without the
    parameters' values): on the crowded queue it reads the same partial indexes, scans no
    table, and takes the 10 due rows."""
    from outbox.delivery.raw import RawStatement

    statement = RawStatement(render(queries.CLAIM, SCHEMA))
    params = {"limit": 10, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED}
    with psycopg.connect(db_url, autocommit=True) as c:
        due_endpoint = _crowded_queue(c)
        c.execute(f"PREPARE claim AS {statement.text}".encode())
        c.execute("SET plan_cache_mode = force_generic_plan")
        values = ", ".join(psycopg.sql.Literal(v).as_string(c)
                           for v in statement.params(params))
        with c.transaction(force_rollback=True):
            rows = c.execute(f"EXPLAIN EXECUTE claim({values})".encode()).fetchall()
            claimed = c.execute(f"EXECUTE claim({values})".encode()).fetchall()
    plan = "\n".join(r[0] for r in rows)
    part = r"deliveries_(p\d+|legacy)"
    assert re.search(f"Index Scan using {part}_pending_by_endpoint on {part}", plan), plan
    assert re.search(f"Index Scan using {part}_due on {part}", plan), plan
    assert "$" in plan  # a generic plan: parameters, not values
    assert not SCANS.findall(plan), plan
    assert len(claimed) == 10 and {r[7] for r in claimed} == {due_endpoint}


def test_plan_check_fails_on_a_plan_that_scans(db_url: str) -> None:
    """The assertion above is not vacuous: with index scans disabled, it sees the scans."""
    with psycopg.connect(db_url, autocommit=True) as c:
        _crowded_queue(c)
        c.execute("SET enable_indexscan = off")
        c.execute("SET enable_indexonlyscan = off")
        c.execute("SET enable_bitmapscan = off")
        plan = _plan(c)
    assert SCANS.findall(plan), plan


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
                ("EXPLAIN " + complete).encode(), _completion_params(done, "w", 10)))
    assert re.search(r"Index Scan using deliveries_p\d+_pkey on deliveries_p\d+ d", plan), plan
    assert "_due" not in plan, plan


def test_claim_rows_are_jobs_by_name(db_url: str) -> None:
    """The claim's columns are Job's fields; job_row refuses a result that is not a Job."""
    from outbox._security.secretbox import SecretBox
    from outbox.delivery.jobs import Job, job_row

    endpoint = add_endpoint(db_url, "https://example.com/h", headers={"X-Team": "billing"})
    (event,) = emit(db_url, 1, "x")

    async def claim(sql: str, params: dict[str, object]) -> list[Job]:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as ac:
            cur = ac.cursor(row_factory=job_row(SecretBox()))
            return await (await cur.execute(sql.encode(), params)).fetchall()

    token = uuid.uuid4()
    params: dict[str, object] = {"limit": 10, "lease": 30.0, "token": token,
                                   **UNBUDGETED}
    (job,) = asyncio.run(claim(render(queries.CLAIM, SCHEMA), params))
    assert (job.token, job.attempt, job.event_id, job.event_type, job.endpoint_id) == (
        token, 1, event, "x", endpoint)
    assert (job.secret, job.previous_secret, job.headers) == (SECRET, None, {"X-Team": "billing"})
    with pytest.raises(TypeError, match="not Job's fields"):
        asyncio.run(claim("SELECT 1 AS delivery_id, 2 AS attempts", {}))


def test_the_claim_floor_leaves_partitions_without_queued_work_out_of_the_plan(
        db_url: str) -> None:
    """Partitions below the floor (claim_floor(): the oldest holding queued work, never above
    the one closed last) are not even planned; on the worker's generic plan they are pruned
    when the executor starts (no scan of them runs); a replayed row below it lowers it."""
    from outbox.admin import partitions
    from outbox.delivery.raw import RawStatement

    endpoint = add_endpoint(db_url, "https://example.com/h")
    emit(db_url, 3)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.deliveries SET state = 'delivered', finished_at = now()")
        for _ in range(3):  # p1, p2, p3 closed; p4 open
            c.execute("UPDATE outbox.delivery_partitions SET opened_at = opened_at"
                      " - interval '1d' WHERE opened_at IS NOT NULL AND closed_at IS NULL")
            partitions.advance(c, SCHEMA, dt.timedelta(hours=1))
        emit(db_url, 1)
        lo: dict[str, int] = dict(c.execute(
            "SELECT deliveries, lo FROM outbox.delivery_partitions").fetchall())
        floor = c.execute("SELECT outbox.claim_floor()").fetchone()
        assert floor == (lo["deliveries_p3"],)  # the one closed last: nothing queued below
        params = {"limit": 10, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED,
                  "floor": floor[0]}
        claim = render(queries.CLAIM, SCHEMA)
        with c.transaction(force_rollback=True):
            plan = "\n".join(r[0] for r in c.execute(("EXPLAIN " + claim).encode(), params))
            claimed = c.execute(claim.encode(), params).fetchall()
        assert len(claimed) == 1 and claimed[0][7] == endpoint
        assert "deliveries_p4" in plan and not re.search(r"deliveries_(p1|p2|legacy)\b", plan)
        statement = RawStatement(claim)
        values = ", ".join(psycopg.sql.Literal(v).as_string(c)
                           for v in statement.params(params))
        c.execute(f"PREPARE claim AS {statement.text}".encode())
        c.execute("SET plan_cache_mode = force_generic_plan")
        with c.transaction(force_rollback=True):
            generic = "\n".join(r[0] for r in c.execute(
                f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE claim({values})".encode()))
        assert "Subplans Removed" in generic and "$" in generic, generic
        # (PostgreSQL 15 still names every partition as a target of the UPDATE)
        assert not re.search(r"Scan .*on deliveries_(p1|p2|legacy)\b", generic), generic
        assert re.search(r"Scan .*on deliveries_p4\b", generic), generic
        c.execute("RESET plan_cache_mode")
        # a dead row of p1 replayed (pending again) brings p1 back under the floor
        c.execute("UPDATE outbox.deliveries SET state = 'pending', finished_at = NULL"
                  " WHERE id = (SELECT min(id) FROM outbox.deliveries)")
        assert c.execute("SELECT outbox.claim_floor()").fetchone() == (lo["deliveries_p1"],)
