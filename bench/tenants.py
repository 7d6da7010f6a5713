"""Emit cost with many tenants: flat in the number of endpoints and tenants.

    .venv/bin/python -m bench.tenants [--tenants 100000] [--rounds 2000]

One scratch database with two outbox schemas, measured interleaved in one run (durable
commits): ``few`` holds one tenant with two endpoints; ``many`` holds ``--tenants`` tenants
with two endpoints each (one subscribed to ``invoice.*``, one to every type: 200,000
endpoints at the default); both also hold a tenant-less endpoint. Each round is an app
transaction with one business INSERT and one ``emit`` of ``invoice.paid`` for a tenant
with two endpoints, so both sides write the same rows (an event, two deliveries);
only the number of other endpoints differs. Then ``emit_many`` of 1,000 events spread
over 100 tenants in ``many``. Prints medians, the ratio, and a JSON line.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import psycopg

import outbox
from bench.common import emit_json, percentiles, scratch_database
from outbox import Event
from outbox.admin.migrations import migrate

FEW, MANY = "outbox_few", "outbox_many"

_ENDPOINTS = """
INSERT INTO {schema}.endpoints (id, url, secret, tenant, event_types)
SELECT gen_random_uuid(), 'https://hooks.example.com/' || i, 'whsec_bench',
       't' || (i / 2), CASE WHEN i %% 2 = 0 THEN '{{invoice.*}}'::text[] END
  FROM generate_series(0, %s - 1) i
"""


def _register(conn: psycopg.Connection[Any], tenants: int, schema: str) -> None:
    migrate(conn, schema)
    conn.execute(f"CREATE TABLE {schema}.orders (id bigint PRIMARY KEY, total int)".encode())
    conn.execute(_ENDPOINTS.format(schema=schema).encode(), (2 * tenants,))
    # a tenant-less endpoint too, on both sides (it receives none of these events)
    conn.execute(f"INSERT INTO {schema}.endpoints (id, url, secret) VALUES"
                 " (gen_random_uuid(), 'https://internal.example.com/', 'whsec_b')".encode())
    # as a long-lived table is: hint bits set, visibility map current (autovacuum may be off)
    conn.execute(f"VACUUM (ANALYZE) {schema}.endpoints".encode())


def _transaction(conn: psycopg.Connection[Any], schema: str, i: int, tenant: str) -> float:
    start = time.perf_counter()
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.orders (id, total) VALUES (%s, %s)".encode(),
                     (i, 10))
        outbox.emit(conn, Event("invoice.paid", {"id": i}, tenant=tenant), schema=schema)
    return time.perf_counter() - start


def _emit_many(conn: psycopg.Connection[Any], tenants: int, schema: str) -> float:
    """emit_many of 1,000 events over 100 tenants: events/s, median of 7 batches."""
    rng = random.Random(7)
    picked = [f"t{rng.randrange(tenants)}" for _ in range(100)]
    took: list[float] = []
    for r in range(7):
        events = [Event("invoice.paid", {"i": i, "r": r}, tenant=picked[i % 100])
                  for i in range(1000)]
        start = time.perf_counter()
        with conn.transaction():
            outbox.emit_many(conn, events, schema=schema)
        took.append(time.perf_counter() - start)
    return 1000 / statistics.median(took)


def run(url: str, tenants: int, rounds: int) -> dict[str, Any]:
    """Both sides in one database (schemas ``outbox_few`` and ``outbox_many``): measured
    in two databases, a per-database difference unrelated to the endpoints (about 0.1 ms
    a transaction, the same for any tenant) swung the ratio between 0.99x and 1.45x."""
    rng = random.Random(1)
    with psycopg.connect(url, autocommit=True) as few, \
            psycopg.connect(url, autocommit=True) as many:
        _register(few, 1, FEW)
        _register(many, tenants, MANY)
        times: dict[str, list[float]] = {"few": [], "many": []}
        conns = (few, many)
        for i in range(rounds + 200):  # the first 200 of each warm up (prepares, caches)
            # each side uses either connection and goes first or second in turn: fixed
            # pairings showed connection and order effects of up to +-0.1 ms
            c_few, c_many = conns[i % 2], conns[1 - i % 2]
            tenant = f"t{rng.randrange(tenants)}"
            if (i // 2) % 2:
                one = _transaction(c_few, FEW, i, "t0")
                other = _transaction(c_many, MANY, i, tenant)
            else:
                other = _transaction(c_many, MANY, i, tenant)
                one = _transaction(c_few, FEW, i, "t0")
            if i >= 200:
                times["few"].append(one)
                times["many"].append(other)
        rate = _emit_many(many, tenants, MANY)
        deliveries = many.execute(f"SELECT count(*) FROM {MANY}.deliveries".encode()).fetchone()
    p_few, p_many = percentiles(times["few"]), percentiles(times["many"])
    return {
        "tenants": tenants, "endpoints": 2 * tenants + 1, "rounds": rounds,
        "few_endpoints_tx_ms": {k: v * 1000 for k, v in p_few.items()},
        "many_endpoints_tx_ms": {k: v * 1000 for k, v in p_many.items()},
        "ratio_median": p_many["p50"] / p_few["p50"],
        "emit_many_100_tenants_events_per_s": rate,
        "deliveries_written": deliveries[0] if deliveries else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    with scratch_database() as url:
        res = run(url, args.tenants, args.rounds)
    print(f"tx + emit, 1 tenant, 2 endpoints      median {res['few_endpoints_tx_ms']['p50']:.3f}"
          f" ms  p99 {res['few_endpoints_tx_ms']['p99']:.3f} ms")
    print(f"tx + emit, {res['endpoints']:,} endpoints   median "
          f"{res['many_endpoints_tx_ms']['p50']:.3f} ms  p99 "
          f"{res['many_endpoints_tx_ms']['p99']:.3f} ms")
    print(f"ratio (median)                        {res['ratio_median']:.2f}x")
    print(f"emit_many, 1,000 events / 100 tenants {res['emit_many_100_tenants_events_per_s']:,.0f}"
          " events/s")
    emit_json("tenants", res)


if __name__ == "__main__":
    main()
