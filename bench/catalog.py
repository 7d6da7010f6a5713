"""The event catalog's cost at emit: the same ~1 KiB payload emitted as a type with a JSON
Schema (checked) and as a type the catalog does not know (unchecked).

    .venv/bin/python -m bench.catalog [--rounds 2000] [--batches 7]
                                      [--synchronous-commit off] [--sql]

Interleaved on one psycopg 3 connection in the same run (which goes first alternates), one
enabled endpoint subscribed to both types, each emit in its own transaction (the app's
INSERT left out: the ratio is of the emit alone, the harshest view). The catalog is held
by the process (the default OUTBOX_CATALOG_REFRESH_SECONDS, re-read when stale, as an
application sees it). Also ``emit_many`` of 1,000 events, and the check alone
(jsonschema-rs, per event, in process). Prints medians and ratios, then a JSON line.

``--sql``: the same through the SQL function ``outbox.emit`` (its PL/pgSQL check), one
``SELECT outbox.emit(...)`` per transaction, and its set form over 1,000 payloads in place
of ``emit_many``; the check alone is then not measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

import outbox
from bench.common import SCHEMA, emit_json, percentiles, scratch_database
from outbox import Event
from outbox._emit import catalog
from outbox.admin import endpoints as ep
from outbox.admin import types

LINE = {"type": "object", "required": ["sku", "quantity", "unit_cents"],
        "properties": {"sku": {"type": "string", "maxLength": 64},
                       "description": {"type": "string"},
                       "quantity": {"type": "integer", "minimum": 1},
                       "unit_cents": {"type": "integer", "minimum": 0}}}
INVOICE = {
    "type": "object", "additionalProperties": False,
    "required": ["invoice_id", "customer", "currency", "total_cents", "lines", "paid_at"],
    "properties": {
        "invoice_id": {"type": "string", "pattern": "^in_[0-9a-z]+$"},
        "customer": {"type": "object", "required": ["id", "email"], "properties": {
            "id": {"type": "string"}, "email": {"type": "string"},
            "name": {"type": "string"}}},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "total_cents": {"type": "integer", "minimum": 0},
        "paid_at": {"type": "string"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "maxItems": 100},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "$defs": {"Line": LINE},
}


def payload(i: int) -> dict[str, Any]:
    """A typical invoice payload of about 1 KiB."""
    lines: list[dict[str, Any]] = [
        {"sku": f"sku-{k:04d}", "description": f"Item {k} of the order, size M",
         "quantity": k + 1, "unit_cents": 1250 + k} for k in range(7)]
    return {"invoice_id": f"in_{i:x}", "customer": {
        "id": f"cus_{i}", "email": f"buyer{i}@example.com", "name": "Ada Lovelace"},
        "currency": "EUR", "total_cents": sum(x["quantity"] * x["unit_cents"] for x in lines),
        "paid_at": "2026-11-25T23:59:00+00:00", "lines": lines,
        "metadata": {"channel": "web", "campaign": "winter"}}


SQL_ONE = "SELECT outbox.emit(%s, %s::jsonb)"
SQL_MANY = "SELECT count(outbox.emit(%s, p)) FROM jsonb_array_elements(%s::jsonb) p"


def _emit(conn: psycopg.Connection[Any], event: Event, in_sql: bool = False) -> float:
    body = json.dumps(event.payload) if in_sql else ""
    start = time.perf_counter()
    with conn.transaction():
        if in_sql:
            conn.execute(SQL_ONE, (event.type, body))
        else:
            outbox.emit(conn, event)
    return time.perf_counter() - start


def _many(conn: psycopg.Connection[Any], name: str, r: int, in_sql: bool = False) -> float:
    events = [Event(name, payload(r * 1000 + i)) for i in range(1000)]
    body = json.dumps([e.payload for e in events]) if in_sql else ""
    start = time.perf_counter()
    with conn.transaction():
        if in_sql:
            conn.execute(SQL_MANY, (name, body))
        else:
            outbox.emit_many(conn, events)
    return time.perf_counter() - start


def _check_alone(rounds: int) -> float:
    """Seconds per event of the catalog check alone (decode + validate), in process."""
    snap = catalog.Snapshot(1, {"t": catalog.Entry("t", INVOICE, False)}, time.monotonic())
    source = payload(1)
    body = json.dumps(source, separators=(",", ":"))
    s = outbox.Settings()
    start = time.perf_counter()
    for _ in range(rounds):
        catalog.check(snap, s, "t", body, source)
    return (time.perf_counter() - start) / rounds


def run(url: str, rounds: int, batches: int, synchronous_commit: str | None,
        in_sql: bool = False) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        if synchronous_commit is not None:
            conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = {}").format(
                sql.Identifier(conn.info.dbname), sql.Literal(synchronous_commit)))
    with psycopg.connect(url, autocommit=True) as conn:
        ep.add(conn, "https://example.com/hook", schema=SCHEMA)
        types.add(conn, "invoice.paid", schema=SCHEMA, json_schema=INVOICE,
                  example=payload(0))
        size = len(json.dumps(payload(10**6), separators=(",", ":")))
        times: dict[str, list[float]] = {"invoice.paid": [], "invoice.free": []}
        order = list(times)
        for i in range(rounds + 200):  # the first 200 warm up (prepares, the catalog read)
            for name in order if i % 2 else order[::-1]:  # alternate who goes first
                took = _emit(conn, Event(name, payload(i)), in_sql)
                if i >= 200:
                    times[name].append(took)
        many: dict[str, list[float]] = {"invoice.paid": [], "invoice.free": []}
        for r in range(batches):
            for name in order if r % 2 else order[::-1]:
                many[name].append(_many(conn, name, r, in_sql))
    checked, free = (percentiles(times[k]) for k in ("invoice.paid", "invoice.free"))
    many_checked, many_free = (statistics.median(many[k]) for k in many)
    return {
        "rounds": rounds, "payload_bytes": size, "emit": "sql" if in_sql else "python",
        "synchronous_commit": synchronous_commit or "server default",
        "emit_with_schema_ms": {k: v * 1000 for k, v in checked.items()},
        "emit_without_schema_ms": {k: v * 1000 for k, v in free.items()},
        "ratio_median": checked["p50"] / free["p50"],
        "emit_many_1000_with_schema_ms": many_checked * 1000,
        "emit_many_1000_without_schema_ms": many_free * 1000,
        "emit_many_ratio_median": many_checked / many_free,
        "check_alone_us": None if in_sql else _check_alone(20_000) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--synchronous-commit", choices=["on", "off"], default=None)
    parser.add_argument("--sql", action="store_true", help="emit with the SQL function")
    args = parser.parse_args()
    with scratch_database() as url:
        res = run(url, args.rounds, args.batches, args.synchronous_commit, args.sql)
    print(f"{res['emit']} emit, payload {res['payload_bytes']} bytes, {res['rounds']} rounds, "
          f"synchronous_commit {res['synchronous_commit']}")
    print(f"emit, type with a schema      median {res['emit_with_schema_ms']['p50']:.3f} ms"
          f"  p99 {res['emit_with_schema_ms']['p99']:.3f} ms")
    print(f"emit, type without a schema   median {res['emit_without_schema_ms']['p50']:.3f} ms"
          f"  p99 {res['emit_without_schema_ms']['p99']:.3f} ms")
    print(f"ratio (median)                {res['ratio_median']:.3f}x")
    print(f"emit_many 1,000, with schema  median {res['emit_many_1000_with_schema_ms']:.1f} ms"
          f"  without {res['emit_many_1000_without_schema_ms']:.1f} ms"
          f"  ratio {res['emit_many_ratio_median']:.3f}x")
    if res["check_alone_us"] is not None:
        print(f"the check alone               {res['check_alone_us']:.1f} us per event")
    emit_json("catalog", res)


if __name__ == "__main__":
    main()
