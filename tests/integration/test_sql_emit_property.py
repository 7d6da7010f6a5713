"""The SQL function outbox.emit and the Python emit write the same deliveries: random
endpoints (tenants, all-tenants, disabled, ordered, exact and wildcard filters, payload
filters) and random events (types, tenants, keys, payloads), each event emitted by emit,
emit_many and the SQL function."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

import outbox
from outbox import Event, InvalidEvent
from outbox._emit.event import prepare
from outbox.admin.filters import compile_filter

TYPES = ["a", "ab", "a.b", "a.b.c", "b", "b.a"]
FILTERS = ["a", "a.b", "b", "a.*", "a.b.*", "b.*", "ab"]
TENANTS = [None, "t1", "t2"]
PAYLOAD_FILTERS = [{"n": 1}, {"n": {"$gte": 1}}, {"tag": {"$in": ["x", "y"]}},
                   {"$or": [{"n": {"$lt": 1}}, {"tag": {"$exists": False}}]},
                   {"tag": {"$nin": ["x"]}, "n": {"$neq": 2}}]
PAYLOADS = [{}, {"n": 1}, {"n": 2, "tag": "x"}, {"n": 0, "tag": ["y", "z"]}, {"n": "1"},
            {"tag": "y"}, [1]]

endpoints = st.lists(st.fixed_dictionaries({
    "tenant": st.sampled_from(TENANTS),
    "all_tenants": st.booleans(),
    "enabled": st.booleans(),
    "ordered": st.booleans(),
    "event_types": st.none() | st.lists(st.sampled_from(FILTERS), min_size=1, max_size=3,
                                        unique=True),
    "filter": st.none() | st.sampled_from(PAYLOAD_FILTERS),
}), max_size=6)
events = st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from(TENANTS),
                            st.sampled_from([None, "k1", "k2"]), st.sampled_from(PAYLOADS)),
                  min_size=1, max_size=6)

Deliveries = list[tuple[uuid.UUID, str | None, str]]


def _deliveries(c: psycopg.Connection[Any], event_id: uuid.UUID) -> Deliveries:
    rows = c.execute("SELECT endpoint_id, key, state FROM outbox.deliveries"
                     " WHERE event_id = %s ORDER BY endpoint_id", (event_id,)).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def _add(c: psycopg.Connection[Any], spec: dict[str, Any]) -> None:
    all_tenants = spec["all_tenants"] and spec["tenant"] is None
    compiled = None if spec["filter"] is None else compile_filter(spec["filter"])
    c.execute("INSERT INTO outbox.endpoints (id, url, secret, tenant, all_tenants, enabled,"
              " ordered, event_types, filter, filter_path) VALUES (%s,"
              " 'https://example.com/h', 's', %s, %s, %s, %s, %s, %s, %s::jsonpath)",
              (uuid.uuid4(), spec["tenant"], all_tenants, spec["enabled"], spec["ordered"],
               spec["event_types"], compiled and Jsonb(compiled.filter),
               compiled and compiled.path))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endpoints=endpoints, events=events)
def test_sql_and_python_emit_write_the_same_deliveries(
        db_url: str, endpoints: list[dict[str, Any]],
        events: list[tuple[str, str | None, str | None, Any]]) -> None:
    with psycopg.connect(db_url) as c:
        for spec in endpoints:
            _add(c, spec)
        batch = outbox.emit_many(c, [Event(t, p, key=k, tenant=tn)
                                     for t, tn, k, p in events])
        for (t, tn, k, p), many_id in zip(events, batch, strict=True):
            one_id = outbox.emit(c, Event(t, p, key=k, tenant=tn))
            row = c.execute("SELECT outbox.emit(%s, %s, key => %s, tenant => %s)",
                            (t, Jsonb(p), k, tn)).fetchone()
            assert row is not None
            sql_id = row[0]
            expected = [(e, k_, s) for e, k_, s in _deliveries(c, one_id)]
            assert _deliveries(c, sql_id) == expected, (t, tn, k)
            assert _deliveries(c, many_id) == expected, (t, tn, k)
        c.rollback()


# Text PostgreSQL can hold (no NUL, no lone surrogate), biased towards the edges of the
# rules: separators, control characters, spaces, non-ASCII, lengths around the caps.
_chars = st.sampled_from(list("aZ09._:/-* \t\n\x1f\x7fé€")) | st.characters(
    exclude_categories=["Cs"], exclude_characters="\x00")
_text = st.text(_chars, max_size=6) | st.text(st.sampled_from("ab"), min_size=120,
                                              max_size=260)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(type_=_text, key=st.none() | _text, ikey=st.none() | _text, tenant=st.none() | _text)
def test_sql_and_python_emit_refuse_the_same_events(
        db_url: str, type_: str, key: str | None, ikey: str | None,
        tenant: str | None) -> None:
    try:
        prepare(Event(type_, {}, key=key, idempotency_key=ikey, tenant=tenant), 1 << 20)
        python_error = None
    except InvalidEvent as exc:
        python_error = str(exc)
    with psycopg.connect(db_url) as c:
        try:
            c.execute("SELECT outbox.emit(%s, '{}', key => %s, idempotency_key => %s,"
                      " tenant => %s)", (type_, key, ikey, tenant))
            sql_error = None
        except psycopg.errors.InvalidParameterValue as exc:
            sql_error = exc.diag.message_primary
        c.rollback()
    assert (python_error is None) == (sql_error is None), (python_error, sql_error)
    if python_error is not None and "lone surrogate" not in python_error:
        assert sql_error is not None
        assert sql_error.split(" ")[:2] == python_error.split(" ")[:2]
