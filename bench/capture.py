"""Table capture and the SQL emit: what they cost.

    .venv/bin/python -m bench.capture [--rows 100000] [--rounds 3] [--emits 2000]

1. A bulk ``UPDATE orders SET total = total + 1`` of every row (``--rows``, one endpoint
   taking the events), committed: without capture (the reference), with capture of every
   column (one event + one delivery per row), and with capture of ``id,status`` only, which
   that UPDATE does not change (no event: the update trigger's WHEN only). Each round runs
   the three in turn, each after a VACUUM, a different one first; medians over
   ``--rounds``, and ratios to the reference.
2. ``--emits`` single emits in one transaction, one round trip each: the Python
   ``outbox.emit`` vs ``SELECT outbox.emit(...)``; medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from outbox.admin import capture
from outbox.admin import endpoints as ep

UPDATE = "UPDATE orders SET total = total + 1"


def _setup(url: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        ep.add(c, "https://example.com/hook", schema=SCHEMA)
        c.execute("CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL,"
                  " total numeric NOT NULL, note text)")
        c.execute("INSERT INTO orders SELECT g, 'new', g, 'note ' || g"
                  " FROM generate_series(1, %s) g", (rows,))


def _timed_update(url: str, columns: list[str] | None, capture_on: bool) -> tuple[float, int]:
    """Seconds of the committed UPDATE, and the events it emitted."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"TRUNCATE {SCHEMA}.events, {SCHEMA}.deliveries")
        c.execute("VACUUM (ANALYZE) orders")
        with c.cursor() as cur:
            if capture_on:
                capture.add(cur, "orders", type="order.changed", key="id", columns=columns,
                            schema=SCHEMA)
            else:
                c.execute(f"SELECT {SCHEMA}.capture_remove('orders')")
        c.execute(f"VACUUM {SCHEMA}.events, {SCHEMA}.deliveries")
    with psycopg.connect(url) as c:
        start = time.perf_counter()
        c.execute(UPDATE)
        c.commit()
        seconds = time.perf_counter() - start
        events = c.execute(f"SELECT count(*) FROM {SCHEMA}.events").fetchone()
    return seconds, int(events[0]) if events else 0


def bulk_update(url: str, rounds: int) -> dict[str, Any]:
    cases = {"plain": (None, False), "captured": (None, True),
             "captured_other_columns": (["id", "status"], True)}
    seconds: dict[str, list[float]] = {k: [] for k in cases}
    events: dict[str, int] = {}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % 3:] + names[:r % 3]:  # each case leads one round
            columns, on = cases[name]
            s, n = _timed_update(url, columns, on)
            seconds[name].append(s)
            events[name] = n
            print(f"round {r + 1}: {name:<24} {s:7.2f} s  {n:>7,} events")
    med = {k: statistics.median(v) for k, v in seconds.items()}
    return {"seconds": seconds, "median_s": med, "events": events,
            "ratio_captured": med["captured"] / med["plain"],
            "ratio_other_columns": med["captured_other_columns"] / med["plain"]}


def single_emits(url: str, n: int, rounds: int) -> dict[str, Any]:
    python_s: list[float] = []
    sql_s: list[float] = []
    payload = {"order": 7, "total": "9.50"}
    with psycopg.connect(url) as c:
        for _ in range(rounds):
            start = time.perf_counter()
            for i in range(n):
                outbox.emit(c, outbox.Event("order.paid", payload, key=str(i)))
            c.commit()
            python_s.append(time.perf_counter() - start)
            text = json.dumps(payload)
            start = time.perf_counter()
            for i in range(n):
                c.execute("SELECT outbox.emit('order.paid', %s::jsonb, key => %s)",
                          (text, str(i)))
            c.commit()
            sql_s.append(time.perf_counter() - start)
    py, sq = statistics.median(python_s), statistics.median(sql_s)
    print(f"{n:,} single emits: Python {py * 1e6 / n:6.0f} us/emit, "
          f"SQL function {sq * 1e6 / n:6.0f} us/emit (x{sq / py:.2f})")
    return {"n": n, "python_s": python_s, "sql_s": sql_s,
            "python_us_per_emit": py * 1e6 / n, "sql_us_per_emit": sq * 1e6 / n,
            "ratio_sql_to_python": sq / py}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--emits", type=int, default=2000)
    args = parser.parse_args()
    with scratch_database() as url:
        _setup(url, args.rows)
        bulk = bulk_update(url, args.rounds)
        med = bulk["median_s"]
        print(f"bulk UPDATE of {args.rows:,} rows (median of {args.rounds}): plain "
              f"{med['plain']:.2f} s, captured {med['captured']:.2f} s "
              f"(x{bulk['ratio_captured']:.2f}), other columns captured "
              f"{med['captured_other_columns']:.2f} s (x{bulk['ratio_other_columns']:.2f})")
        emits = single_emits(url, args.emits, args.rounds)
    emit_json("capture", {"rows": args.rows, "rounds": args.rounds, "bulk_update": bulk,
                          "single_emits": emits})


if __name__ == "__main__":
    main()
