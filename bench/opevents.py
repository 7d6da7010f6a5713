"""A dead-letter storm: the cost of operational events in the worker's completion.

    .venv/bin/python -m bench.opevents [--deliveries 400] [--rounds 5]

Each round: a fresh set of ``--deliveries`` events to one endpoint (tenant ``acme``),
claimed in one claim, then recorded dead in ONE completion statement (as a worker's flush
records a batch of exhausted 500s: ``delivery.store._completion_params``), timed around
that statement alone. Three variants per round, in turn (same process, same machine, so
they share its noise):

- ``reference``: the completion without the operational CTEs (``COMPLETE`` with
  ``OPERATIONAL`` taken out: the statement as it was before operational events);
- ``unsubscribed``: the completion as shipped, no endpoint takes operational events (each
  dead delivery still writes its ``outbox.delivery.dead`` event, routed to nobody);
- ``subscribed``: as shipped, with the tenant's endpoint subscribed to ``outbox.*`` and an
  all-tenants one (two deliveries per operational event);
- ``delivered_reference`` and ``delivered``: the same deliveries recorded delivered (the
  hot path), without and with the operational CTEs, subscribed as above.

Prints the median milliseconds of each, its ratio to its reference (the delivered
variants: to ``delivered_reference``), and the rows each
completion wrote (events, deliveries, attempts), then one JSON line.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import psycopg

import outbox
from bench.common import SCHEMA, emit_json, scratch_database
from outbox._db.connection import render
from outbox.admin import endpoints as ep
from outbox.delivery import queries as dq
from outbox.delivery.jobs import Completion
from outbox.delivery.store import _completion_params

VARIANTS = ("reference", "unsubscribed", "subscribed", "delivered_reference", "delivered")


def reference_statement() -> str:
    """COMPLETE without the operational CTEs (and the wake-up's read of op_fan)."""
    text = dq.COMPLETE
    for old, new in ((dq.OPERATIONAL + ",", ""),
                     ("\n                            UNION ALL SELECT 1 FROM op_fan", "")):
        if old not in text:
            raise SystemExit("bench.opevents: COMPLETE changed shape; update reference_statement")
        text = text.replace(old, new)
    return text


def _setup(url: str, subscribed: bool, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("TRUNCATE outbox.events, outbox.deliveries, outbox.delivery_attempts,"
                  " outbox.endpoint_flow, outbox.endpoints")
        ep.add(c, "http://127.0.0.1:9/bad", schema=SCHEMA, tenant="acme", max_attempts=1)
        if subscribed:
            ep.add(c, "http://127.0.0.1:9/ops", schema=SCHEMA, tenant="acme",
                   event_types=["outbox.*"])
            ep.add(c, "http://127.0.0.1:9/noc", schema=SCHEMA, all_tenants=True,
                   event_types=["outbox.*"])
    with psycopg.connect(url) as c:
        outbox.emit_many(c, [outbox.Event("order.created", {"n": i}, tenant="acme")
                             for i in range(n)])
        c.commit()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("VACUUM ANALYZE outbox.events, outbox.deliveries, outbox.endpoints")


def _completions(rows: list[tuple[Any, ...]], dead: bool) -> list[Completion]:
    if not dead:
        return [Completion(delivery_id=r[0], token=r[1], state="delivered", delay=0.0,
                           refund=0, status=200, error=None, outcome="delivered",
                           attempt=r[2], duration_ms=3.0, error_class=None, excerpt="ok")
                for r in rows]
    return [Completion(delivery_id=r[0], token=r[1], state="dead", delay=0.0, refund=0,
                       status=500, error="attempts exhausted (1/1): HTTP 500",
                       outcome="exhausted", attempt=r[2], duration_ms=3.0,
                       error_class="http_status", excerpt="oops") for r in rows]


def _round(url: str, variant: str, n: int) -> tuple[float, dict[str, int]]:
    _setup(url, variant in ("subscribed", "delivered"), n)
    reference = variant in ("reference", "delivered_reference")
    complete = render(reference_statement() if reference else dq.COMPLETE, SCHEMA)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SET default_transaction_isolation = 'read committed'")
        token = uuid.uuid4()
        claimed = c.execute(
            "UPDATE outbox.deliveries SET attempts = attempts + 1, lease_token = %s,"
            " visible_at = now() + interval '60 s' WHERE state = 'pending'"
            " RETURNING id, lease_token, attempts", (token,)).fetchall()
        assert len(claimed) == n
        params = _completion_params(_completions(claimed, not variant.startswith("deliv")),
                                    "bench", 10)
        before = _counts(c)
        started = time.perf_counter()
        c.execute(complete.encode(), params).fetchone()
        elapsed = time.perf_counter() - started
        after = _counts(c)
    return elapsed * 1000, {k: after[k] - before[k] for k in after}


def _counts(c: psycopg.Connection[Any]) -> dict[str, int]:
    row = c.execute("SELECT (SELECT count(*) FROM outbox.events),"
                    " (SELECT count(*) FROM outbox.deliveries),"
                    " (SELECT count(*) FROM outbox.delivery_attempts)").fetchone()
    assert row is not None
    return dict(zip(("events", "deliveries", "attempts"), (int(v) for v in row), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    written: dict[str, dict[str, int]] = {}
    with scratch_database() as url:
        _round(url, "subscribed", args.deliveries)  # warm-up: caches, plans
        for _ in range(args.rounds):
            for variant in VARIANTS:
                ms, rows = _round(url, variant, args.deliveries)
                times[variant].append(ms)
                written[variant] = rows
    refs = {v: statistics.median(times["delivered_reference" if v.startswith("deliv")
                                     else "reference"]) for v in VARIANTS}
    results: dict[str, Any] = {"deliveries": args.deliveries, "rounds": args.rounds}
    print(f"{args.deliveries} deliveries dying in one completion, median of {args.rounds}"
          " rounds (a shared, noisy machine: compare the ratios):")
    for variant in VARIANTS:
        median = statistics.median(times[variant])
        ref = refs[variant]
        results[variant] = {"median_ms": round(median, 2), "ratio": round(median / ref, 2),
                            "rows": written[variant],
                            "samples_ms": [round(t, 2) for t in times[variant]]}
        print(f"  {variant:13} {median:8.2f} ms  x{median / ref:4.2f}  rows written:"
              f" {written[variant]}")
    emit_json("opevents", results)


if __name__ == "__main__":
    main()
