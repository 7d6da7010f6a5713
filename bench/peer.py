"""Peer-queue references: pgqueuer's and procrastinate's no-op job drain rates.

pgqueuer (procrastinate: see ``bench.peer_procrastinate``): each run gets a fresh scratch
database on the local PostgreSQL: pgqueuer's schema is installed, N jobs for one
entrypoint are enqueued in one bulk call and the queue table is VACUUM ANALYZEd (as
``bench.deliver`` does to its backlog), then a QueueManager with an async no-op
entrypoint drains them. The clock runs from the consumer start (``QueueManager.run``)
to the N-th entrypoint call; ``to_exit_s`` also includes the manager's shutdown, whose
final status-log flush is what removes the last jobs from the queue table. Commits are
durable (synchronous_commit is left as the server has it). The event loop is uvloop,
as pgqueuer's own ``pgq run`` uses.

    .venv/bin/python -m bench.peer [--jobs 20000] [--repeat 2]
        [--peers pgqueuer,procrastinate] [--batches default,100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from importlib.metadata import version
from typing import Any, TextIO

import asyncpg  # type: ignore[import-untyped]
import uvloop
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

from bench import peer_procrastinate
from bench.common import emit_json, scratch_database

ENTRYPOINT = "noop"
DEFAULT_BATCH = 10  # QueueManager.run(batch_size=10) in pgqueuer 1.6.0


async def queue_count(conn: Any, queries: Queries) -> int:
    """Rows in pgqueuer's queue table (finished jobs are deleted from it)."""
    table = queries.qbq.qualified.queue_table
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))


async def prepare(url: str, n: int) -> None:
    """Install pgqueuer's schema, enqueue n jobs in one bulk INSERT, VACUUM ANALYZE."""
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        ids = await queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
        assert len(ids) == n == await queue_count(conn, queries)
        await conn.execute(f"VACUUM ANALYZE {queries.qbq.qualified.queue_table}")
    finally:
        await conn.close()


async def drain(url: str, n: int, batch: int | None) -> dict[str, Any]:
    """Run one consumer until n jobs have gone through the no-op entrypoint."""
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        qm = QueueManager(queries)
        done = 0
        finished = 0.0

        @qm.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            nonlocal done, finished
            done += 1
            if done == n:
                finished = time.perf_counter()
                qm.shutdown.set()

        start = time.perf_counter()
        if batch is None:
            await qm.run()
        else:
            await qm.run(batch_size=batch)
        exited = time.perf_counter()
        left = await queue_count(conn, queries)
        commit = await conn.fetchval("SHOW synchronous_commit")
    finally:
        await conn.close()
    elapsed = finished - start
    return {
        "batch": batch or DEFAULT_BATCH,
        "jobs": n,
        "seconds": round(elapsed, 4),
        "rate": round(n / elapsed, 1),
        "to_exit_s": round(exited - start, 4),
        "left_queued": left,
        "synchronous_commit": commit,
    }


def one_run(n: int, batch: int | None) -> dict[str, Any]:
    """One drain of n jobs on a fresh scratch database (batch None: pgqueuer's default)."""
    with scratch_database() as url:
        uvloop.run(prepare(url, n))
        return uvloop.run(drain(url, n, batch))


def pgqueuer_runs(n: int, repeat: int, batches: tuple[int | None, ...] = (None,),
                  out: TextIO | None = None) -> dict[str, Any]:
    """``repeat`` drains of n jobs per batch size (None: pgqueuer's default): the runs,
    the median rate per batch size and the versions; a line per run on ``out`` if given."""
    pgq_version = version("pgqueuer")
    runs: list[dict[str, Any]] = []
    for batch in batches:
        for _ in range(repeat):
            r = one_run(n, batch)
            runs.append(r)
            label = f"{r['batch']}{' (default)' if batch is None else ''}"
            if out:
                print(f"pgqueuer {pgq_version} no-op drain, batch {label}: {r['rate']:.0f}"
                      f" jobs/s  ({r['jobs']} jobs in {r['seconds']:.2f}s; exit at"
                      f" {r['to_exit_s']:.2f}s, {r['left_queued']} left in queue table)",
                      file=out, flush=True)
    sizes = {b or DEFAULT_BATCH for b in batches}
    medians = {str(size): statistics.median(r["rate"] for r in runs if r["batch"] == size)
               for size in sizes}
    return {"queue": "pgqueuer", "version": pgq_version, "asyncpg": version("asyncpg"),
            "loop": "uvloop", "default_batch": DEFAULT_BATCH, "median_rate_by_batch": medians,
            "runs": runs}


def _batch(text: str) -> int | None:
    return None if text == "default" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--peers", default="pgqueuer,procrastinate",
                        help="comma-separated: pgqueuer, procrastinate")
    parser.add_argument("--batches", default="default,100",
                        help="pgqueuer batch sizes, comma-separated ('default': 10)")
    args = parser.parse_args()
    peers = set(args.peers.split(","))
    results: dict[str, Any] = {}
    if "pgqueuer" in peers:
        batches = tuple(_batch(b) for b in args.batches.split(","))
        results["pgqueuer"] = pgqueuer_runs(args.jobs, args.repeat, batches, sys.stdout)
    if "procrastinate" in peers:
        results["procrastinate"] = peer_procrastinate.runs(args.jobs, args.repeat,
                                                           out=sys.stdout)
    emit_json("peer", results)


if __name__ == "__main__":
    main()
