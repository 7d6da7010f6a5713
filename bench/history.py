"""Claim latency with millions of delivered rows present vs an empty table.

    .venv/bin/python -m bench.history [--history 5000000] [--rounds 300] [--partitions 1]

In a scratch database: 1,000 pending deliveries due (their events' ids sort above the
history's, as UUIDv7 ids do); claim 100 of them and roll back,
``--rounds`` times, first with no history, then after inserting ``--history`` delivered
rows (one event each) and ANALYZE. The partial index ``deliveries_due`` only holds pending
rows, so the target is a median at most 1.2x the empty-table one.

Deliveries are partitioned (migrations/0018): ``--partitions N`` spreads the history over N
partitions (the manager opens the next one between chunks, as it does every
OUTBOX_PARTITION_SECONDS), to measure what the number of partitions kept costs the claim.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
import uuid
from typing import Any

import psycopg

from bench.common import SCHEMA, emit_json, percentiles, scratch_database
from outbox._db.connection import render
from outbox.admin import endpoints as ep
from outbox.admin import partitions
from outbox.delivery import queries

# Event ids are time-ordered (UUIDv7) in real use: the history sorts below the backlog.
PENDING = """
INSERT INTO outbox.events (id, type, payload)
SELECT lpad(to_hex(1000000000000 + g), 32, '0')::uuid, 'p', '{}'
  FROM generate_series(1, 1000) g;
INSERT INTO outbox.deliveries (event_id, endpoint_id)
SELECT id, %(ep)s FROM outbox.events WHERE type = 'p'
"""
HISTORY = """
WITH ev AS (
    INSERT INTO outbox.events (id, type, payload)
    SELECT lpad(to_hex(%(from)s + g), 32, '0')::uuid, 'h', '{}'
      FROM generate_series(1, %(n)s) g RETURNING id)
INSERT INTO outbox.deliveries (event_id, endpoint_id, state, attempts, finished_at)
SELECT id, %(ep)s, 'delivered', 1, now() FROM ev
"""


# The claim's per-endpoint budget off (no slots in use, no cap): the claim alone is measured;
# no rotation position (each claim starts at the lowest endpoint id, rolled back anyway).
_UNBUDGETED = {"used_ids": [], "used_counts": [], "default_cap": 1 << 30, "after": None}


def _claims(conn: psycopg.Connection[Any], rounds: int) -> list[float]:
    claim = render(queries.CLAIM, SCHEMA)
    # the claim's floor, as the worker reads it (once a second)
    floor = conn.execute(render(queries.CLAIM_FLOOR, SCHEMA)).fetchone()
    samples = []
    for _ in range(rounds):
        params = {"limit": 100, "lease": 30.0, "token": uuid.uuid4(), **_UNBUDGETED,
                  "floor": floor[0] if floor else -(1 << 63)}
        start = time.perf_counter()
        with conn.transaction(force_rollback=True):
            rows = conn.execute(claim, params).fetchall()
        samples.append(time.perf_counter() - start)
        assert len(rows) == 100
    return samples

RECENT_BACKLOG = """
WITH old AS (DELETE FROM outbox.deliveries WHERE state = 'pending'
             RETURNING event_id, endpoint_id)
INSERT INTO outbox.deliveries (event_id, endpoint_id) SELECT event_id, endpoint_id FROM old
"""


def _next_partition(c: psycopg.Connection[Any]) -> None:
    c.execute("UPDATE outbox.delivery_partitions SET opened_at = opened_at - interval '1d'"
              " WHERE opened_at IS NOT NULL AND closed_at IS NULL")
    partitions.advance(c, SCHEMA, dt.timedelta(hours=1))


def run(url: str, history: int, rounds: int, parts: int = 1) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as c:
        endpoint = ep.add(c, "https://example.com/h", schema=SCHEMA).endpoint.id
        for statement in PENDING.split(";"):
            c.execute(statement.encode(), {"ep": endpoint})
        c.execute("ANALYZE outbox.deliveries")
        empty = _claims(c, rounds)
        started = time.perf_counter()
        chunk = min(1_000_000, -(-history // parts))
        for i, start in enumerate(range(0, history, chunk)):
            if i and parts > 1:
                _next_partition(c)
            c.execute(HISTORY.encode(), {"n": min(chunk, history - start), "ep": endpoint,
                                         "from": start})
        if parts > 1:  # the backlog is recent: its rows in the open partition (new ids)
            c.execute(RECENT_BACKLOG.encode())
        c.execute("VACUUM ANALYZE outbox.deliveries")
        fill_s = time.perf_counter() - started
        full = _claims(c, rounds)
        kept = len(partitions.status(c, SCHEMA, dt.timedelta(days=1)))
    e, f = percentiles([x * 1000 for x in empty]), percentiles([x * 1000 for x in full])
    return {"history": history, "partitions": kept, "fill_seconds": fill_s, "empty_ms": e,
            "history_ms": f,
            "ratio_median": statistics.median(full) / statistics.median(empty)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=1,
                        help="spread the history over this many partitions")
    args = parser.parse_args()
    with scratch_database() as url:
        res = run(url, args.history, args.rounds, args.partitions)
    print(f"claim 100 of 1,000 due, empty table      median {res['empty_ms']['p50']:.2f} ms"
          f"  p99 {res['empty_ms']['p99']:.2f} ms")
    print(f"the same with {res['history']:,} delivered rows ({res['partitions']} partitions"
          f" in all)  median "
          f"{res['history_ms']['p50']:.2f} ms  p99 {res['history_ms']['p99']:.2f} ms"
          f"  (filled in {res['fill_seconds']:.0f} s)")
    print(f"ratio (median)                           {res['ratio_median']:.2f}x (target <= 1.2x)")
    emit_json("history", res)


if __name__ == "__main__":
    main()
