"""bench.emit's other stacks: the same app transaction on psycopg2, asyncpg and SQLAlchemy.

Each stack runs, interleaved on one connection (or session) of its own, a transaction with
one business INSERT and then: nothing, a bare second INSERT, or ``emit`` on that stack's
handle; then ``emit_many`` of 1,000 events. Its figures compare ``emit`` with the bare
INSERT *on the same stack*, so the stack's own per-statement cost (SQLAlchemy's, say)
is in both.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import outbox
from bench.common import percentiles
from outbox import Event

ORDER = "INSERT INTO orders (id, total) VALUES (%s, 10)"
AUDIT = "INSERT INTO audit (id, total) VALUES (%s, 10)"
EXTRAS = ("", "insert", "emit")
WARMUP = 200

SyncTx = Callable[[int, str], None]
AsyncTx = Callable[[int, str], Awaitable[None]]
SyncMany = Callable[[list[Event]], None]
AsyncMany = Callable[[list[Event]], Awaitable[None]]


def _event(i: int) -> Event:
    return Event("order.created", {"id": i, "total": 10})


def _batches() -> list[list[Event]]:
    return [[Event("order.created", {"id": i, "round": r}) for i in range(1000)]
            for r in range(5)]


def summary(times: dict[str, list[float]], many: list[float]) -> dict[str, Any]:
    """One stack's figures: tx percentiles (ms), ratios, emit_many events/s."""
    plain, insert, emit = (percentiles(times[k]) for k in EXTRAS)
    return {
        "plain_tx_ms": {k: v * 1000 for k, v in plain.items()},
        "second_insert_tx_ms": {k: v * 1000 for k, v in insert.items()},
        "emit_tx_ms": {k: v * 1000 for k, v in emit.items()},
        "ratio_median": emit["p50"] / plain["p50"],
        "second_insert_ratio_median": insert["p50"] / plain["p50"],
        "emit_vs_second_insert_median": emit["p50"] / insert["p50"],
        "emit_many_1000_events_per_s": 1000 / statistics.median(many),
    }


def measure(tx: SyncTx, many: SyncMany, rounds: int, base: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {k: [] for k in EXTRAS}
    for i in range(rounds + WARMUP):
        for k, extra in enumerate(EXTRAS):
            start = time.perf_counter()
            tx(base + 3 * i + k, extra)
            if i >= WARMUP:
                times[extra].append(time.perf_counter() - start)
    spent = []
    for events in _batches():
        start = time.perf_counter()
        many(events)
        spent.append(time.perf_counter() - start)
    return summary(times, spent)


async def measure_async(tx: AsyncTx, many: AsyncMany, rounds: int, base: int
                        ) -> dict[str, Any]:
    times: dict[str, list[float]] = {k: [] for k in EXTRAS}
    for i in range(rounds + WARMUP):
        for k, extra in enumerate(EXTRAS):
            start = time.perf_counter()
            await tx(base + 3 * i + k, extra)
            if i >= WARMUP:
                times[extra].append(time.perf_counter() - start)
    spent = []
    for events in _batches():
        start = time.perf_counter()
        await many(events)
        spent.append(time.perf_counter() - start)
    return summary(times, spent)


def run_psycopg2(url: str, rounds: int, base: int) -> dict[str, Any]:
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        def tx(i: int, extra: str) -> None:
            with conn.cursor() as cur:
                cur.execute(ORDER, (i,))
                if extra == "insert":
                    cur.execute(AUDIT, (i,))
            if extra == "emit":
                outbox.emit(conn, _event(i))
            conn.commit()

        def many(events: list[Event]) -> None:
            outbox.emit_many(conn, events)
            conn.commit()

        return measure(tx, many, rounds, base)
    finally:
        conn.close()


def run_asyncpg(url: str, rounds: int, base: int) -> dict[str, Any]:
    import asyncpg  # type: ignore[import-untyped]

    async def main() -> dict[str, Any]:
        conn = await asyncpg.connect(url)
        order, audit = ORDER.replace("%s", "$1"), AUDIT.replace("%s", "$1")

        async def tx(i: int, extra: str) -> None:
            async with conn.transaction():
                await conn.execute(order, i)
                if extra == "insert":
                    await conn.execute(audit, i)
                elif extra == "emit":
                    await outbox.emit_async(conn, _event(i))

        async def many(events: list[Event]) -> None:
            async with conn.transaction():
                await outbox.emit_many_async(conn, events)

        try:
            return await measure_async(tx, many, rounds, base)
        finally:
            await conn.close()

    return asyncio.run(main())


def run_sqlalchemy(url: str, rounds: int, base: int) -> dict[str, Any]:
    """A sync ``Session`` on the psycopg dialect; business writes by ``text()``."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    order, audit = text(ORDER.replace("%s", ":i")), text(AUDIT.replace("%s", ":i"))
    try:
        with Session(engine) as session:
            def tx(i: int, extra: str) -> None:
                session.execute(order, {"i": i})
                if extra == "insert":
                    session.execute(audit, {"i": i})
                elif extra == "emit":
                    outbox.emit(session, _event(i))
                session.commit()

            def many(events: list[Event]) -> None:
                outbox.emit_many(session, events)
                session.commit()

            return measure(tx, many, rounds, base)
    finally:
        engine.dispose()


def run_sqlalchemy_asyncpg(url: str, rounds: int, base: int) -> dict[str, Any]:
    """An ``AsyncSession`` on the asyncpg dialect (the FastAPI stack)."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    order, audit = text(ORDER.replace("%s", ":i")), text(AUDIT.replace("%s", ":i"))

    async def main() -> dict[str, Any]:
        engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
        try:
            async with AsyncSession(engine) as session:
                async def tx(i: int, extra: str) -> None:
                    await session.execute(order, {"i": i})
                    if extra == "insert":
                        await session.execute(audit, {"i": i})
                    elif extra == "emit":
                        await outbox.emit_async(session, _event(i))
                    await session.commit()

                async def many(events: list[Event]) -> None:
                    await outbox.emit_many_async(session, events)
                    await session.commit()

                return await measure_async(tx, many, rounds, base)
        finally:
            await engine.dispose()

    return asyncio.run(main())


STACKS: dict[str, Callable[[str, int, int], dict[str, Any]]] = {
    "psycopg2": run_psycopg2,
    "asyncpg": run_asyncpg,
    "sqlalchemy": run_sqlalchemy,
    "sqlalchemy_asyncpg": run_sqlalchemy_asyncpg,
}
