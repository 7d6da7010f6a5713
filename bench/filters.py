"""Payload filters' cost on emit, and where to evaluate them (docs/guides/filters.md).

    .venv/bin/python -m bench.filters [--rounds 2000] [--endpoints 10000]

One scratch database, one schema per configuration, emits interleaved on one connection
(the order rotates each round), ``synchronous_commit`` off on the scratch database (the
commit's disk flush is the same for every variant and its jitter would swamp them):

1. Flat cost. ``reference``: the event's tenant has one plain endpoint of its type and
   the schema nothing else. ``filtered``: the same, plus ``--endpoints`` endpoints WITH a
   payload filter that emit never has to evaluate: all but 10 of other tenants (10 each,
   of the event's type), 10 of the event's tenant but of other types.
   ``unfiltered``: the same endpoints without filters (the cost of their number alone).
   Requirement: ``filtered`` / ``reference`` <= 1.1 (median emit call, and median
   transaction).
2. Where to evaluate, with filters that DO apply: the event's tenant has 10 endpoints of
   its type, 5 whose filter matches the payload, 5 whose filter does not.
   (a) in emit's routing SQL (what outbox does): emit evaluates the 10 filters and writes
   5 deliveries. (b) at claim: emit writes 10 deliveries (measured: the same endpoints
   without filters), then a later transaction finishes the 5 non-matching ones without
   sending (measured: one UPDATE of the event's 10 deliveries, by primary key, reading
   the event's payload and evaluating each endpoint's compiled filter, finishing the 5
   that do not match: a lower bound of a real claim, which also leases the rows first).
Prints medians and one JSON line.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

import outbox
from bench.common import emit_json, percentiles, scratch_database
from outbox import Event
from outbox.admin.filters import compile_filter
from outbox.admin.migrations import migrate

TENANT = "t0"
TYPE = "invoice.paid"
PAYLOAD = {"amount": 150, "currency": "EUR", "customer": {"tier": "gold", "id": 42},
           "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]}
OTHER_FILTER: dict[str, Any] = {"customer.tier": {"$in": ["gold", "platinum"]},
                                "amount": {"$gte": 1000}}
MATCH: dict[str, Any] = {"amount": {"$gte": 100}, "currency": {"$in": ["EUR", "USD"]}}
NO_MATCH: dict[str, Any] = {"amount": {"$lt": 100}, "customer.tier": "gold"}

_INSERT = """
INSERT INTO {s}.endpoints (id, url, secret, tenant, event_types, filter, filter_path,
                           description)
SELECT gen_random_uuid(), 'https://example.com/h', 's', %(tenant)s || (g / 10)::text,
       %(types)s, %(filter)s, %(path)s::jsonpath, %(note)s
  FROM generate_series(%(first)s::int, %(last)s::int) g
"""


def _endpoints(conn: psycopg.Connection[Any], schema: str, *, first: int, last: int,
               tenant: str, types: list[str], spec: dict[str, Any] | None,
               note: str = "") -> None:
    """Endpoints ``first..last`` of tenants ``tenant || g / 10`` (``tenant`` itself when
    it is TENANT), with filter ``spec`` (or none)."""
    compiled = compile_filter(spec) if spec is not None else None
    query = _INSERT if tenant != TENANT else _INSERT.replace("%(tenant)s || (g / 10)::text",
                                                             "%(tenant)s")
    conn.execute(sql.SQL(query.replace("{s}", "{}")).format(sql.Identifier(schema)), {
        "tenant": tenant, "types": types, "first": first, "last": last, "note": note,
        "filter": Jsonb(compiled.filter) if compiled else None,
        "path": compiled.path if compiled else None})


def _setup_flat(conn: psycopg.Connection[Any], n: int) -> None:
    for schema in ("reference", "filtered", "unfiltered"):
        migrate(conn, schema)
        _endpoints(conn, schema, first=0, last=0, tenant=TENANT, types=[TYPE], spec=None)
        if schema == "reference":
            continue
        spec = OTHER_FILTER if schema == "filtered" else None
        _endpoints(conn, schema, first=10, last=n - 1, tenant="t", types=[TYPE], spec=spec)
        _endpoints(conn, schema, first=1, last=10, tenant=TENANT,
                   types=["order.*", "refund.created"], spec=spec)
        conn.execute(sql.SQL("ANALYZE {}.endpoints").format(sql.Identifier(schema)))


def _setup_scope(conn: psycopg.Connection[Any]) -> None:
    for schema in ("in_sql", "at_claim"):
        migrate(conn, schema)
        for k, spec in enumerate([MATCH, NO_MATCH]):
            # at_claim: no filter in the routing (emit writes every delivery); the compiled
            # filter kept in the description for the finishing UPDATE to evaluate
            stored = spec if schema == "in_sql" else None
            _endpoints(conn, schema, first=5 * k, last=5 * k + 4, tenant=TENANT,
                       types=[TYPE], spec=stored, note=compile_filter(spec).path)
        conn.execute(sql.SQL("ANALYZE {}.endpoints").format(sql.Identifier(schema)))


# The event's deliveries by primary key (a claim finds its rows by index too; deliveries
# has no index on event_id): the newest 10, read before the timed statement.
_NEWEST = "SELECT array_agg(id) FROM (SELECT id FROM {s}.deliveries ORDER BY id DESC LIMIT 10) d"
_FINISH = """
UPDATE {s}.deliveries d SET state = 'delivered', finished_at = now()
  FROM {s}.events e, {s}.endpoints p
 WHERE d.id = ANY (%s) AND e.id = d.event_id AND p.id = d.endpoint_id
   AND d.state = 'pending' AND NOT (e.payload::jsonb @@ p.description::jsonpath)
"""


def _emit_round(conn: psycopg.Connection[Any], schema: str, out: dict[str, list[float]]
                ) -> None:
    start = time.perf_counter()
    with conn.transaction():
        call = time.perf_counter()
        outbox.emit(conn, Event(TYPE, PAYLOAD, tenant=TENANT), schema=schema)
        out[schema + ".emit"].append(time.perf_counter() - call)
    out[schema + ".tx"].append(time.perf_counter() - start)


def run(url: str, rounds: int, n: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(
            sql.Identifier(conn.info.dbname)))
    with psycopg.connect(url, autocommit=True) as conn:
        _setup_flat(conn, n)
        _setup_scope(conn)
        flat = ["reference", "filtered", "unfiltered"]
        scope = ["in_sql", "at_claim"]
        t: dict[str, list[float]] = {f"{s}.{k}": [] for s in flat + scope
                                     for k in ("emit", "tx")}
        t["at_claim.finish"] = []
        finish = sql.SQL(_FINISH.replace("{s}", "{0}")).format(sql.Identifier("at_claim"))
        newest = sql.SQL(_NEWEST.replace("{s}", "{0}")).format(sql.Identifier("at_claim"))
        for i in range(rounds + 200):  # the first 200 rounds warm up, then are dropped
            if i == 200:
                for samples in t.values():
                    samples.clear()
            order = flat[i % 3:] + flat[:i % 3]
            for schema in order + (scope if i % 2 else scope[::-1]):
                _emit_round(conn, schema, t)
                if schema == "at_claim":
                    ids = conn.execute(newest).fetchone()[0]  # type: ignore[index]
                    start = time.perf_counter()
                    conn.execute(finish, (ids,))
                    t["at_claim.finish"].append(time.perf_counter() - start)
        written = {s: conn.execute(sql.SQL("SELECT count(*) FROM {}.deliveries").format(
            sql.Identifier(s))).fetchone()[0] for s in scope}  # type: ignore[index]
    ms = {k: percentiles(v)["p50"] * 1000 for k, v in t.items()}
    b_total = ms["at_claim.tx"] + ms["at_claim.finish"]
    return {
        "rounds": rounds, "endpoints": n,
        "median_ms": ms,
        "p99_ms": {k: percentiles(v)["p99"] * 1000 for k, v in t.items()},
        "filtered_vs_reference_emit": ms["filtered.emit"] / ms["reference.emit"],
        "filtered_vs_reference_tx": ms["filtered.tx"] / ms["reference.tx"],
        "unfiltered_vs_reference_emit": ms["unfiltered.emit"] / ms["reference.emit"],
        "filtered_vs_unfiltered_emit": ms["filtered.emit"] / ms["unfiltered.emit"],
        "deliveries_written_per_event": {s: written[s] / (rounds + 200) for s in scope},
        "in_sql_tx_ms": ms["in_sql.tx"],
        "at_claim_tx_plus_finish_ms": b_total,
        "in_sql_vs_at_claim": ms["in_sql.tx"] / b_total,
        "stdev_reference_emit_ms": statistics.stdev(t["reference.emit"]) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--endpoints", type=int, default=10_000)
    args = parser.parse_args()
    with scratch_database() as url:
        r = run(url, args.rounds, args.endpoints)
    m = r["median_ms"]
    print(f"emit, {r['endpoints']:,} endpoints, {r['rounds']} interleaved rounds (medians)")
    print(f"  reference (1 plain endpoint)       emit {m['reference.emit']:.3f} ms"
          f"  tx {m['reference.tx']:.3f} ms")
    print(f"  + {r['endpoints']:,} filtered, not in scope    emit {m['filtered.emit']:.3f} ms"
          f"  tx {m['filtered.tx']:.3f} ms   {r['filtered_vs_reference_emit']:.3f}x /"
          f" {r['filtered_vs_reference_tx']:.3f}x of reference (<= 1.1)")
    print(f"  + {r['endpoints']:,} unfiltered, not in scope  emit {m['unfiltered.emit']:.3f} ms"
          f"  tx {m['unfiltered.tx']:.3f} ms   {r['unfiltered_vs_reference_emit']:.3f}x")
    print("10 endpoints in scope, 5 filters match:")
    print(f"  (a) in emit's SQL   tx {m['in_sql.tx']:.3f} ms"
          f" (emit {m['in_sql.emit']:.3f}), writes"
          f" {r['deliveries_written_per_event']['in_sql']:.0f} deliveries")
    print(f"  (b) at claim        tx {m['at_claim.tx']:.3f} ms"
          f" (emit {m['at_claim.emit']:.3f}) + finish {m['at_claim.finish']:.3f} ms ="
          f" {r['at_claim_tx_plus_finish_ms']:.3f} ms, writes"
          f" {r['deliveries_written_per_event']['at_claim']:.0f} deliveries")
    print(f"  (a) / (b)           {r['in_sql_vs_at_claim']:.3f}x")
    emit_json("filters", r)


if __name__ == "__main__":
    main()
