"""Peer-queue reference: procrastinate's no-op job drain rate on the local PostgreSQL.

Each run gets a fresh scratch database: procrastinate's schema is applied
(``SchemaManager.apply_schema_async``), N jobs of one async no-op task are deferred with
``batch_defer_async`` (1,000 per call) and the table is VACUUM ANALYZEd (as
``bench.deliver`` does to its backlog), then one worker (``run_worker_async``,
``concurrency`` 50, ``wait=False``: it stops once the queue is empty) drains them. The
clock runs from the worker start to the N-th task call; ``to_exit_s`` also includes the
worker's shutdown (it waits for the last jobs' status updates). Everything else is
procrastinate's default: its psycopg connection pool (``psycopg_pool`` defaults: 4
connections; 20 or 50 were no faster here), LISTEN/NOTIFY on, finished jobs kept
(``delete_jobs`` "never"); only its signal handlers are left out. Commits are durable
(synchronous_commit as the server has it); the event loop is asyncio's, as procrastinate's
own ``procrastinate worker`` uses.

    .venv/bin/python -m bench.peer [--peers procrastinate] [--jobs 20000] [--repeat 2]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from importlib.metadata import version
from typing import Any, TextIO

import psycopg
from procrastinate import App, PsycopgConnector

from bench.common import scratch_database

TASK = "noop"
CONCURRENCY = 50
DEFER_CHUNK = 1000
LEFT_SQL = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"


async def prepare(app: App, url: str, n: int) -> None:
    """Apply procrastinate's schema, defer n no-op jobs (DEFER_CHUNK per round trip), then
    VACUUM ANALYZE the jobs table (as bench.deliver does to its backlog: this server runs
    without autovacuum; without statistics the drain was ~20% slower here)."""
    await app.schema_manager.apply_schema_async()
    task = app.tasks[TASK]
    for first in range(0, n, DEFER_CHUNK):
        await task.batch_defer_async(*({} for _ in range(min(DEFER_CHUNK, n - first))))
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE procrastinate_jobs")


async def drain(url: str, n: int, concurrency: int) -> dict[str, Any]:
    """Defer n jobs, then run one worker until it has called the no-op task n times."""
    connector = PsycopgConnector(conninfo=url)
    app = App(connector=connector)
    done = 0
    finished = 0.0

    @app.task(name=TASK)
    async def noop() -> None:
        nonlocal done, finished
        done += 1
        if done == n:
            finished = time.perf_counter()

    async with app.open_async():
        await prepare(app, url, n)
        start = time.perf_counter()
        await app.run_worker_async(concurrency=concurrency, wait=False,
                                   install_signal_handlers=False)
        exited = time.perf_counter()
        pool_size = (connector.pool.min_size, connector.pool.max_size)
    if done != n:
        raise RuntimeError(f"procrastinate worker ran {done} of {n} jobs")
    with psycopg.connect(url) as conn:
        row = conn.execute(LEFT_SQL).fetchone()
        commit = conn.execute("SHOW synchronous_commit").fetchone()
    elapsed = finished - start
    return {"concurrency": concurrency, "jobs": n, "seconds": round(elapsed, 4),
            "rate": round(n / elapsed, 1), "to_exit_s": round(exited - start, 4),
            "left_queued": row[0] if row else None, "pool_min_max": pool_size,
            "synchronous_commit": commit[0] if commit else None}


def one_run(n: int, concurrency: int = CONCURRENCY) -> dict[str, Any]:
    """One drain of n jobs on a fresh scratch database."""
    with scratch_database() as url:
        return asyncio.run(drain(url, n, concurrency))


def runs(n: int, repeat: int, concurrency: int = CONCURRENCY, out: TextIO | None = None
         ) -> dict[str, Any]:
    """``repeat`` drains of n jobs: the runs, their median rate and the versions; a line
    per run on ``out`` if given."""
    results: list[dict[str, Any]] = []
    for _ in range(repeat):
        r = one_run(n, concurrency)
        results.append(r)
        if out:
            print(f"procrastinate {version('procrastinate')} no-op drain, concurrency"
                  f" {r['concurrency']}: {r['rate']:.0f} jobs/s  ({r['jobs']} jobs in"
                  f" {r['seconds']:.2f}s; exit at {r['to_exit_s']:.2f}s,"
                  f" {r['left_queued']} left to do)", file=out, flush=True)
    return {"queue": "procrastinate", "version": version("procrastinate"),
            "psycopg": version("psycopg"), "loop": "asyncio", "concurrency": concurrency,
            "median_rate": statistics.median(r["rate"] for r in results), "runs": results}

