"""Payload filters end to end: random filters on real endpoints, random payloads emitted
by emit_many, emit and the SQL function, a real worker and receiver. Each endpoint
receives exactly the events whose payload its filter matches, by a pure-Python evaluation
of the filter (tests/support/filter_eval.py), once each, and nothing else."""

from __future__ import annotations

import collections
import json
import random
from decimal import Decimal
from typing import Any

import psycopg

import outbox
from outbox import Event
from outbox.testing.receiver import Receiver
from tests.support import filter_eval
from tests.support.workers import add_endpoint, drain, settings

PATHS = ["amount", "currency", "customer.tier", "tags", "lines.sku", "refund"]
VALUES: dict[str, list[Any]] = {
    "amount": [0, 5, 99.5, 100, 150, 1000, "100", None],
    "currency": ["EUR", "USD", "GBP", "eur", 1],
    "customer.tier": ["gold", "silver", None, True],
    "tags": ["vip", "new", "b2b"],
    "lines.sku": ["A-1", "B-7", "C-3"],
    "refund": [True, False, None, 0],
}


def _leaf(rng: random.Random) -> dict[str, Any]:
    path = rng.choice(PATHS)
    pool = VALUES[path]
    op = rng.choice(["=", "$eq", "$neq", "$in", "$nin", "$gt", "$gte", "$lt", "$lte",
                     "$exists"])
    if op == "=":
        return {path: rng.choice(pool)}
    if op in ("$in", "$nin"):
        return {path: {op: rng.sample(pool, rng.randint(1, 3))}}
    if op == "$exists":
        return {path: {op: rng.random() < 0.5}}
    if op.startswith(("$gt", "$lt")):
        ordered = [v for v in pool if isinstance(v, str | int | float)
                   and not isinstance(v, bool)]
        return {path: {op: rng.choice(ordered or [1])}}
    return {path: {op: rng.choice(pool)}}


def _filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kind = rng.random()
    if depth < 2 and kind < 0.3:
        return {rng.choice(["$and", "$or"]): [_filter(rng, depth + 1)
                                              for _ in range(rng.randint(1, 3))]}
    spec: dict[str, Any] = {}
    for _ in range(rng.randint(1, 2)):
        spec.update(_leaf(rng))
    return spec


def _payload(rng: random.Random, n: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"n": n}
    if rng.random() < 0.8:
        doc["amount"] = rng.choice(VALUES["amount"])
    if rng.random() < 0.8:
        doc["currency"] = rng.choice(VALUES["currency"])
    if rng.random() < 0.6:
        doc["customer"] = {"tier": rng.choice(VALUES["customer.tier"])}
    if rng.random() < 0.5:
        doc["tags"] = rng.sample(VALUES["tags"], rng.randint(0, 2))
    if rng.random() < 0.5:
        doc["lines"] = [{"sku": rng.choice(VALUES["lines.sku"])}
                        for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.3:
        doc["refund"] = rng.choice(VALUES["refund"])
    return doc


def test_random_filters_deliver_exactly_the_matching_events(db_url: str) -> None:
    rng = random.Random(20261126)
    with Receiver() as rx:
        specs: dict[str, dict[str, Any] | None] = {f"/f{i}": _filter(rng) for i in range(12)}
        specs["/plain"] = None
        for path, spec in specs.items():
            add_endpoint(db_url, rx.url + path, event_types=["invoice.*"], filter=spec)
        add_endpoint(db_url, rx.url + "/other-type", event_types=["order.*"],
                     filter={"amount": {"$exists": True}})
        payloads = [_payload(rng, n) for n in range(600)]
        with psycopg.connect(db_url) as c:
            ids = outbox.emit_many(c, [Event("invoice.paid", p) for p in payloads[:300]])
            ids += [outbox.emit(c, Event("invoice.void", p)) for p in payloads[300:450]]
            for p in payloads[450:]:
                row = c.execute("SELECT outbox.emit('invoice.paid', %s::jsonb)",
                                (json.dumps(p),)).fetchone()
                assert row is not None
                ids.append(row[0])
            c.commit()
        expected = collections.Counter(
            (str(event_id), path) for event_id, p in zip(ids, payloads, strict=True)
            for path, spec in specs.items()
            if spec is None or filter_eval.matches(
                spec, json.loads(json.dumps(p), parse_float=Decimal)))
        per_path = collections.Counter(path for _, path in expected)
        assert per_path["/plain"] == 600
        assert sum(1 for p in specs if 0 < per_path[p] < 600) >= 6, per_path  # not vacuous
        drain(settings(db_url, concurrency=32, endpoint_max_in_flight=32))
        got = collections.Counter((r.webhook_id, r.path) for r in rx.received)
    assert got == expected
