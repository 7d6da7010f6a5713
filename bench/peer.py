"""Peer-queue reference: pgqueuer's no-op job drain rate on the local PostgreSQL.

Each run gets a fresh scratch database: pgqueuer's schema is installed, N jobs for one
entrypoint are enqueued in one bulk call, then a QueueManager with an async no-op
entrypoint drains them. The clock runs from the consumer start (``QueueManager.run``)
to the N-th entrypoint call; ``to_exit_s`` also includes the manager's shutdown, whose
final status-log flush is what removes the last jobs from the queue table. Commits are
durable (synchronous_commit is left as the server has it). The event loop is uvloop,
as pgqueuer's own ``pgq run`` uses.

    .venv/bin/python -m bench.peer [--jobs 20000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import time
from importlib.metadata import version
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import uvloop
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

from bench.common import emit_json, scratch_database

ENTRYPOINT = "noop"
DEFAULT_BATCH = 10  # QueueManager.run(batch_size=10) in pgqueuer 1.6.0


async def queue_count(conn: Any, queries: Queries) -> int:
    """Rows in pgqueuer's queue table (finished jobs are deleted from it)."""
    table = queries.qbq.qualified.queue_table
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))


async def prepare(url: str, n: int) -> None:
    """Install pgqueuer's schema and enqueue n jobs in one bulk INSERT."""
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        ids = await queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
        assert len(ids) == n == await queue_count(conn, queries)
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
    with scratch_database() as url:
        uvloop.run(prepare(url, n))
        return uvloop.run(drain(url, n, batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    pgq_version = version("pgqueuer")
    runs: list[dict[str, Any]] = []
    for batch in (None, 100):
        for _ in range(args.repeat):
            r = one_run(args.jobs, batch)
            runs.append(r)
            label = f"{r['batch']}{' (default)' if batch is None else ''}"
            print(
                f"pgqueuer {pgq_version} no-op drain, batch {label}: {r['rate']:.0f} jobs/s"
                f"  ({r['jobs']} jobs in {r['seconds']:.2f}s; exit at {r['to_exit_s']:.2f}s,"
                f" {r['left_queued']} left in queue table)",
                flush=True,
            )
    emit_json(
        "peer",
        {
            "queue": "pgqueuer",
            "version": pgq_version,
            "asyncpg": version("asyncpg"),
            "loop": "uvloop",
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
