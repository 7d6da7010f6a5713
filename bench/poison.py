"""Poison isolation's cost: the worker's batched completion (Store.complete) on the common
path against the bare COMPLETE statement it wraps (the path before isolation existed), and
the failure path (one poison row among the batch: split down to it, dead-lettered). Also
the claim (Store.claim) with its row-data guards (``attempts + 1`` capped in SQL, rows that
do not load isolated) against the same claim with the unguarded statement.

    python -m bench.poison [--batch 500] [--rounds 15]

Each round claims a fresh batch of deliveries per variant and records them delivered; the
order of the two common-path variants alternates from round to round. Prints medians, the
ratios, and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from outbox._db.connection import render
from outbox.admin import endpoints as ep
from outbox.delivery import queries
from outbox.delivery.jobs import Completion, Job
from outbox.delivery.raw import RawStatement
from outbox.delivery.settings import WorkerSettings
from outbox.delivery.store import Store, _completion_params


def _done(job: Job) -> Completion:
    return Completion(delivery_id=job.delivery_id, token=job.token, state="delivered",
                      delay=0.0, refund=0, status=200, error=None, outcome="delivered",
                      attempt=job.attempt, duration_ms=1.0, error_class=None, excerpt=None)


async def _bare(store: Store, done: list[Completion]) -> None:
    """The statement alone, as Store.complete ran it before poison isolation."""
    sql = render(queries.COMPLETE, SCHEMA)
    params = _completion_params(done, "bench", store.settings.failing_threshold)
    async with store.connections.transaction() as conn:
        cur = await conn.execute(sql, params)
    await cur.fetchone()


# the claim statement before its guard: a hand-written attempts of 2147483647 overflowed it
_UNGUARDED = queries.CLAIM.replace("least(d.attempts, 2147483646) + 1", "d.attempts + 1")
assert _UNGUARDED != queries.CLAIM


async def _rounds(url: str, batch: int, rounds: int) -> dict[str, list[float]]:
    cfg = WorkerSettings(database_url=url, schema_name=SCHEMA, metrics_port=0,
                         lease_seconds=600.0, endpoint_max_in_flight=batch)  # one endpoint
    store = Store(cfg)
    await store.open()
    times: dict[str, list[float]] = {"store": [], "bare": [], "poison": [],
                                     "claim": [], "claim_unguarded": []}
    guarded = store._claim_sql
    try:
        for n in range(rounds):  # the order alternates: neither goes first every round
            order = ("store", "bare", "poison") if n % 2 else ("bare", "store", "poison")
            for variant in order:
                unguarded = variant == "bare"
                store._claim_sql = RawStatement(render(_UNGUARDED, SCHEMA)) if unguarded \
                    else guarded
                start = time.perf_counter()
                jobs = await store.claim(batch)
                if variant != "poison":
                    times["claim_unguarded" if unguarded else "claim"].append(
                        time.perf_counter() - start)
                assert len(jobs) == batch, len(jobs)
                done = [_done(j) for j in jobs]
                if variant == "poison":  # a retry delay no timestamp can hold
                    done[batch // 3] = done[batch // 3]._replace(
                        state="pending", delay=1e300, outcome="retry")
                start = time.perf_counter()
                if variant == "bare":
                    await _bare(store, done)
                else:
                    await store.complete(done)
                times[variant].append(time.perf_counter() - start)
    finally:
        await store.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with scratch_database() as url:
        with psycopg.connect(url, autocommit=True) as c:
            ep.add(c, "http://127.0.0.1:9/sink", schema=SCHEMA)
        with psycopg.connect(url) as c:
            for _ in range(3 * args.rounds):
                outbox.emit_many(c, [outbox.Event("bench.poison", {"n": i})
                                     for i in range(args.batch)])
            c.commit()
        times = asyncio.run(_rounds(url, args.batch, args.rounds))
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    results: dict[str, Any] = {
        "batch": args.batch, "rounds": args.rounds,
        "median_ms": {k: round(v, 2) for k, v in med.items()},
        "store_over_bare": round(med["store"] / med["bare"], 3),
        "poison_over_store": round(med["poison"] / med["store"], 2),
        "claim_over_unguarded": round(med["claim"] / med["claim_unguarded"], 3),
    }
    print(f"complete {args.batch} (median of {args.rounds}): Store.complete "
          f"{med['store']:.2f} ms, bare statement {med['bare']:.2f} ms "
          f"(ratio {results['store_over_bare']}); with one poison row {med['poison']:.2f} ms "
          f"({results['poison_over_store']}x)")
    print(f"claim {args.batch}: Store.claim {med['claim']:.2f} ms, unguarded statement "
          f"{med['claim_unguarded']:.2f} ms (ratio {results['claim_over_unguarded']})")
    emit_json("poison", results)


if __name__ == "__main__":
    main()
