"""Emit overhead: an app transaction with one business INSERT, with and without ``emit``.

    .venv/bin/python -m bench.emit [--rounds 2000] [--stacks psycopg2,asyncpg,...|none]
                                   [--synchronous-commit off]

The variants run interleaved on one connection in the same run (durable commits,
``synchronous_commit`` as the server has it), one enabled endpoint subscribed, so each
``emit`` writes an event row and a delivery row. The reference beside it: the same
transaction with a second bare INSERT (into a two-column table) instead of ``emit``: the
floor for anything that adds one statement to the transaction. Also ``emit_many`` of
1,000 events. Then the same on the other stacks emit takes (bench/emit_stacks.py:
psycopg2, asyncpg, a SQLAlchemy Session on psycopg, an AsyncSession on asyncpg), each
against a bare second INSERT on that stack, under ``results["stacks"]``. Prints medians,
the ratios, and a JSON line. ``--synchronous-commit off`` (the scratch database's setting,
so every stack's connections get it) takes the commit's disk flush out: on a machine
whose disk others share, its jitter otherwise swamps the fraction of a millisecond that
the statements differ by.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

import outbox
from bench import emit_stacks
from bench.common import SCHEMA, emit_json, percentiles, scratch_database
from outbox import Event
from outbox.admin import endpoints as ep


def _business(conn: psycopg.Connection[Any], i: int, extra: str) -> float:
    start = time.perf_counter()
    with conn.transaction():
        conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (i, 10))
        if extra == "emit":
            outbox.emit(conn, Event("order.created", {"id": i, "total": 10}))
        elif extra == "insert":
            conn.execute("INSERT INTO audit (id, total) VALUES (%s, %s)", (i, 10))
    return time.perf_counter() - start


def run(url: str, rounds: int, stacks: list[str] | None = None,
        synchronous_commit: str | None = None) -> dict[str, Any]:
    """psycopg 3's figures (the keys bench.suite reads), and under ``stacks`` each stack's
    (``stacks``: names from emit_stacks.STACKS; None: all of them)."""
    if synchronous_commit is not None:
        with psycopg.connect(url, autocommit=True) as conn:
            db = conn.info.dbname
            conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = {}").format(
                sql.Identifier(db), sql.Literal(synchronous_commit)))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total int)")
        conn.execute("CREATE TABLE audit (id bigint PRIMARY KEY, total int)")
        ep.add(conn, "https://example.com/hook", schema=SCHEMA)
        times: dict[str, list[float]] = {"": [], "insert": [], "emit": []}
        for i in range(rounds + 200):  # the first 200 of each warm up (prepares, caches)
            for k, (extra, samples) in enumerate(times.items()):
                took = _business(conn, 3 * i + k, extra)
                if i >= 200:
                    samples.append(took)
        many: list[float] = []
        for r in range(7):
            events = [Event("order.created", {"id": i, "round": r}) for i in range(1000)]
            start = time.perf_counter()
            with conn.transaction():
                outbox.emit_many(conn, events)
            many.append(time.perf_counter() - start)
    p_plain, p_insert, p_emit = (percentiles(times[k]) for k in ("", "insert", "emit"))
    per_stack = {"psycopg": emit_stacks.summary(times, many)}
    for n, name in enumerate(emit_stacks.STACKS if stacks is None else stacks, start=1):
        per_stack[name] = emit_stacks.STACKS[name](url, rounds, n * 10_000_000)
    return {
        "rounds": rounds,
        "synchronous_commit": synchronous_commit or "server default",
        "stacks": per_stack,
        "plain_tx_ms": {k: v * 1000 for k, v in p_plain.items()},
        "second_insert_tx_ms": {k: v * 1000 for k, v in p_insert.items()},
        "emit_tx_ms": {k: v * 1000 for k, v in p_emit.items()},
        "ratio_median": p_emit["p50"] / p_plain["p50"],
        "second_insert_ratio_median": p_insert["p50"] / p_plain["p50"],
        "emit_many_1000_events_per_s": 1000 / statistics.median(many),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--stacks", default=",".join(emit_stacks.STACKS),
                        help="comma-separated, of: " + ", ".join(emit_stacks.STACKS))
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default=None,
                        help="set on the scratch database (default: the server's)")
    args = parser.parse_args()
    stacks = [s for s in args.stacks.split(",") if s and s != "none"]
    unknown = set(stacks) - set(emit_stacks.STACKS)
    if unknown:
        parser.error(f"unknown stack(s): {', '.join(sorted(unknown))}")
    with scratch_database() as url:
        res = run(url, args.rounds, stacks, args.synchronous_commit)
    print(f"business tx, 1 INSERT          median {res['plain_tx_ms']['p50']:.3f} ms"
          f"  p99 {res['plain_tx_ms']['p99']:.3f} ms")
    print(f"business tx, 1 INSERT + emit   median {res['emit_tx_ms']['p50']:.3f} ms"
          f"  p99 {res['emit_tx_ms']['p99']:.3f} ms")
    print(f"  reference: + a bare INSERT   median {res['second_insert_tx_ms']['p50']:.3f} ms"
          f"  p99 {res['second_insert_tx_ms']['p99']:.3f} ms")
    print(f"ratio (median)                 {res['ratio_median']:.2f}x"
          f"  (bare INSERT: {res['second_insert_ratio_median']:.2f}x)")
    print(f"emit_many, 1,000 events        {res['emit_many_1000_events_per_s']:,.0f} events/s")
    _print_stacks(res["stacks"])
    emit_json("emit", res)


def _print_stacks(stacks: dict[str, dict[str, Any]]) -> None:
    print("\nper stack (medians, ms)   1 INSERT  +INSERT  +emit   emit/plain  emit/+INSERT"
          "  emit_many ev/s")
    for name, r in stacks.items():
        print(f"  {name:<22} {r['plain_tx_ms']['p50']:8.3f} {r['second_insert_tx_ms']['p50']:8.3f}"
              f" {r['emit_tx_ms']['p50']:7.3f} {r['ratio_median']:9.2f}x"
              f" {r['emit_vs_second_insert_median']:11.2f}x"
              f" {r['emit_many_1000_events_per_s']:14,.0f}")


if __name__ == "__main__":
    main()
