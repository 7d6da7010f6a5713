"""Payload filters: refused at registration with an error naming the bad part and nothing
written (one case each); stored, shown, replaced and removed; emit routes by them (Python
emit, emit_many by COPY and by INSERT, the SQL function); test-filter answers with the
routing's evaluator, tenant-scoped."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest

import outbox
from outbox import EndpointNotFound, Event, InvalidEndpoint
from outbox.admin import endpoints as ep
from outbox.admin import filters
from tests.support.cli import invoke
from tests.support.pg import SCHEMA, count

DEEP: dict[str, Any] = {"a": 1}
for _ in range(filters.FILTER_MAX_DEPTH):
    DEEP = {"$or": [DEEP]}

BAD: list[tuple[Any, str]] = [
    ([1], "filter must be a JSON object, not a list"),
    ("{not json", "filter is not valid JSON"),
    ('{"a": NaN}', "filter is not valid JSON"),
    ({"a": float("nan")}, "filter is not plain JSON"),
    ({}, "filter: an empty filter object"),
    ({"$not": {"a": 1}}, "filter.$not: unknown operator '$not' here"),
    ({"a": {"$regex": "x"}}, "filter.a: unknown operator '$regex'; use one of $eq"),
    ({"a": {"b": 1}}, "use a dotted path, e.g. 'a.b'"),
    ({"a": {}}, "filter.a: an empty operator object"),
    ({"a": {"$in": []}}, "filter.a.$in: must be a non-empty list of values, not a list"),
    ({"a": {"$in": "x"}}, "filter.a.$in: must be a non-empty list of values, not a string"),
    ({"a": {"$nin": list(range(101))}}, "filter.a.$nin: 101 values, over 100"),
    ({"a": {"$in": [1, [2]]}}, "filter.a.$in[1]: must be a string, a number, true, false"),
    ({"a": {"$gt": True}}, "filter.a.$gt: must be a number or a string, not a boolean"),
    ({"a": {"$lte": None}}, "filter.a.$lte: must be a number or a string, not null"),
    ({"a": {"$exists": 1}}, "filter.a.$exists: must be true or false, not a number"),
    ({"a": {"$eq": {"x": 1}}}, "filter.a.$eq: must be a string, a number, true, false or null"),
    ({"a": [1, 2]}, "filter.a: must be a string, a number, true, false or null, not a list"),
    ({"$and": {"a": 1}}, "filter.$and: must be a non-empty list of filter objects, not an"),
    ({"$or": []}, "filter.$or: must be a non-empty list of filter objects"),
    ({"$or": [{"a": 1}, 2]}, "filter.$or[1]: must be a filter object, not a number"),
    ({"$or": [{"a": {"$gt": []}}]}, "filter.$or[0].a.$gt: must be a number or a string"),
    ({"a..b": 1}, "filter.a..b: the path has an empty segment"),
    ({"a.$b": 1}, "filter.a.$b: a path segment must not start with '$'"),
    ({"a\nb": 1}, "the path has a control character"),
    ({".".join("a" * 17): 1}, "the path has 17 segments, over 16"),
    ({"a" * 129: 1}, "a path segment is 129 characters, over 128"),
    (DEEP, "$and/$or nested over 4 levels"),
    ({"$and": [{f"k{i}": i} for i in range(65)]}, "the filter has over 64 conditions"),
    ({"a": "x" * 5000}, "filter is 5008 bytes of JSON, over 4096"),
    ({"a": "x\x00"}, "filter.a: a NUL character"),
    ({"a": "\ud800"}, "filter is not plain JSON"),
]


@pytest.mark.parametrize(("spec", "message"), BAD)
def test_a_bad_filter_is_refused_naming_the_bad_part_and_writes_nothing(
        db_url: str, spec: Any, message: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(InvalidEndpoint) as exc:
            ep.add(c, "https://example.com/h", schema=SCHEMA, filter=spec)
        assert message in str(exc.value)
        assert count(db_url, "endpoints") == 0
        kept = ep.add(c, "https://example.com/h", schema=SCHEMA, filter={"k": 1}).endpoint
        with pytest.raises(InvalidEndpoint) as exc:
            ep.update(c, kept.id, schema=SCHEMA, filter=spec)
        assert message in str(exc.value)
        assert ep.get(c, kept.id, schema=SCHEMA).filter == {"k": 1}


def test_a_filter_and_its_removal_together_are_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, "https://example.com/h", schema=SCHEMA, filter={"k": 1}).endpoint
        with pytest.raises(InvalidEndpoint, match="not both"):
            ep.update(c, e.id, schema=SCHEMA, filter={"k": 2}, clear_filter=True)
        assert ep.get(c, e.id, schema=SCHEMA).filter == {"k": 1}


def test_a_filter_is_stored_replaced_kept_and_removed(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, "https://example.com/h", schema=SCHEMA,
                   filter='{"amount": {"$gte": 100}}').endpoint
        assert e.filter == {"amount": {"$gte": 100}}
        assert ep.update(c, e.id, schema=SCHEMA, description="x").endpoint.filter == {
            "amount": {"$gte": 100}}
        assert ep.update(c, e.id, schema=SCHEMA, filter={"b": True}).endpoint.filter == {
            "b": True}
        assert ep.update(c, e.id, schema=SCHEMA, clear_filter=True).endpoint.filter is None
        row = c.execute("SELECT filter, filter_path FROM outbox.endpoints").fetchone()
        assert row == (None, None)


def _routed(db_url: str) -> dict[str, list[int]]:
    """Per endpoint description, the payload "n" of each event it got, sorted."""
    with psycopg.connect(db_url) as c:
        # (not payload->>'n': json's operators refuse the payload holding \u0000)
        rows = c.execute("SELECT p.description, substring(e.payload::text"
                         " FROM '\"n\": ?(\\d+)')::int FROM outbox.deliveries d"
                         " JOIN outbox.endpoints p ON p.id = d.endpoint_id"
                         " JOIN outbox.events e ON e.id = d.event_id").fetchall()
    out: dict[str, list[int]] = {}
    for name, n in rows:
        out.setdefault(name, []).append(n)
    return {k: sorted(v) for k, v in out.items()}


PAYLOADS = [{"n": 0, "amount": 50, "currency": "EUR"},
            {"n": 1, "amount": 150, "currency": "EUR"},
            {"n": 2, "amount": 500, "currency": "USD", "tags": ["vip", "b2b"]},
            {"n": 3, "amount": "500", "currency": "GBP"},
            {"n": 4, "currency": "EUR", "customer": {"tier": "gold"}},
            {"n": 5, "amount": 150, "note": "NUL \x00 inside"}]
EXPECTED = {"all": [0, 1, 2, 3, 4, 5], "big": [1, 2],  # 5: NUL, matches no filter
            "eur-or-vip": [0, 1, 2, 4],
            "gold": [4], "other-type": [], "no-amount": [4]}


def _endpoints(c: psycopg.Connection[Any]) -> None:
    for name, spec, types in [
            ("all", None, None),
            ("big", {"amount": {"$gt": 100}}, ["invoice.*"]),
            ("eur-or-vip", {"$or": [{"currency": "EUR"}, {"tags": "vip"}]}, None),
            ("gold", {"customer.tier": {"$in": ["gold", "platinum"]}}, None),
            ("other-type", {"amount": {"$gt": 0}}, ["order.created"]),
            ("no-amount", {"amount": {"$exists": False}, "n": {"$neq": 5}}, None)]:
        ep.add(c, "https://example.com/h", schema=SCHEMA, filter=spec, event_types=types,
               description=name)


@pytest.mark.parametrize("how", ["emit", "emit_many", "emit_many_idempotent", "sql"])
def test_emit_routes_by_the_filter(db_url: str, how: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        _endpoints(c)
    with psycopg.connect(db_url) as c:
        events = [Event("invoice.paid", p,
                        idempotency_key=f"k{p['n']}" if how.endswith("idempotent") else None)
                  for p in PAYLOADS]
        if how == "emit":
            for e in events:
                outbox.emit(c, e)
        elif how.startswith("emit_many"):
            outbox.emit_many(c, events)
        else:
            for p in PAYLOADS:
                if p["n"] != 5:  # jsonb, the SQL function's argument, holds no NUL
                    c.execute("SELECT outbox.emit('invoice.paid', %s::jsonb)",
                              (json.dumps(p),))
        c.commit()
    expected = EXPECTED if how != "sql" else {
        k: [n for n in v if n != 5] for k, v in EXPECTED.items()}
    assert _routed(db_url) == {k: v for k, v in expected.items() if v}


def test_emit_many_without_filtered_routes_still_copies(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.add(c, "https://example.com/h", schema=SCHEMA, description="plain")
        ep.add(c, "https://example.com/h", schema=SCHEMA, description="other",
               tenant="t1", filter={"n": 1})
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [Event("a", {"n": i}) for i in range(3)])
        c.commit()
    assert _routed(db_url) == {"plain": [0, 1, 2]}


def test_try_filter_uses_the_stored_filter_and_is_tenant_scoped(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, "https://example.com/h", schema=SCHEMA, tenant="acme",
                   filter={"amount": {"$gt": 100}, "currency": "EUR"}).endpoint
        plain = ep.add(c, "https://example.com/h", schema=SCHEMA, tenant="acme").endpoint
        got = filters.try_filter(c, e.id, {"amount": 150, "currency": "USD"}, schema=SCHEMA)
        assert got.matches is False
        assert got.conditions == (("amount", True), ("currency", False))
        got = filters.try_filter(c, str(e.id), {"amount": 150, "currency": "EUR"},
                                 schema=SCHEMA, tenant="acme")
        assert got.matches is True
        assert filters.try_filter(c, e.id, {"amount": "x\x00"}, schema=SCHEMA).matches is False
        assert filters.try_filter(c, plain.id, [1], schema=SCHEMA).matches is True
        for tenant in ("other", "acme "):
            with pytest.raises(EndpointNotFound):
                filters.try_filter(c, e.id, {}, schema=SCHEMA, tenant=tenant)
        with pytest.raises(EndpointNotFound):
            filters.try_filter(c, uuid.uuid4(), {}, schema=SCHEMA)
        with pytest.raises(EndpointNotFound, match="ids look like a UUID"):
            filters.try_filter(c, "nope", {}, schema=SCHEMA)


def test_the_cli_sets_shows_tests_and_removes_a_filter(db_url: str, tmp_path: Any) -> None:
    bad = invoke(db_url, "endpoints", "add", "https://example.com/h", "--filter",
                 '{"amount": {"$gt": true}}')
    assert bad.exit_code == 1
    assert bad.stderr.startswith("error: filter.amount.$gt: must be a number or a string")
    assert count(db_url, "endpoints") == 0
    spec = tmp_path / "filter.json"
    spec.write_text('{"amount": {"$gte": 100}}')
    done = invoke(db_url, "endpoints", "add", "https://example.com/h", "--filter", f"@{spec}")
    assert done.exit_code == 0, done.output
    eid = done.stdout.split()[1]
    shown = invoke(db_url, "endpoints", "show", eid)
    assert 'filter:       {"amount": {"$gte": 100}}' in shown.stdout
    assert json.loads(invoke(db_url, "endpoints", "show", eid, "--json").stdout)["filter"] == {
        "amount": {"$gte": 100}}
    tried = invoke(db_url, "endpoints", "test-filter", eid, "--payload", '{"amount": 99}')
    assert tried.exit_code == 0, tried.output
    assert tried.stdout.splitlines()[0] == "matches: no"
    assert "fails  amount" in tried.stdout
    tried = invoke(db_url, "endpoints", "test-filter", eid, "--payload", '{"amount": 100}',
                   "--json")
    assert json.loads(tried.stdout) == {"matches": True, "filter": {"amount": {"$gte": 100}},
                                        "conditions": [{"condition": "amount",
                                                        "matches": True}]}
    other = invoke(db_url, "endpoints", "test-filter", str(uuid.uuid4()), "--payload", "{}")
    assert other.exit_code == 1 and "no endpoint" in other.stderr
    notjson = invoke(db_url, "endpoints", "test-filter", eid, "--payload", "{")
    assert notjson.exit_code == 1 and "--payload is not valid JSON" in notjson.stderr
    both = invoke(db_url, "endpoints", "update", eid, "--filter", '{"a": 1}', "--no-filter")
    assert both.exit_code == 2
    done = invoke(db_url, "endpoints", "update", eid, "--no-filter")
    assert done.exit_code == 0, done.output
    assert "filter:      -" in done.stdout


def test_emit_many_async_routes_by_the_filter(db_url: str) -> None:
    import asyncio

    with psycopg.connect(db_url, autocommit=True) as c:
        _endpoints(c)

    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as c:
            await outbox.emit_many_async(c, [Event("invoice.paid", p) for p in PAYLOADS])
            await c.commit()

    asyncio.run(go())
    assert _routed(db_url) == {k: v for k, v in EXPECTED.items() if v}
