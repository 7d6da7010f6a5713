"""The SQL function outbox.emit checks payloads against the event catalog before any write,
as the Python emit does: the failing path named, nothing written, the same modes; and its
check (PL/pgSQL) agrees with the Python one (jsonschema-rs) on random payloads."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox._emit.catalog import compile_schema
from outbox.admin import types
from tests.support.cli import execute
from tests.support.pg import SCHEMA, count

LINE = {"type": "object", "required": ["sku"],
        "properties": {"sku": {"type": "string", "pattern": "^[a-z]+$"},
                       "quantity": {"type": "integer", "minimum": 1}}}
INVOICE = {
    "type": "object", "required": ["amount"], "additionalProperties": False,
    "properties": {"amount": {"type": "integer", "minimum": 0},
                   "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
                   "odd key": {"type": "string", "maxLength": 2}},
    "$defs": {"Line": LINE},
}


def _register(url: str, name: str, schema: Any) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        types.add(c, name, schema=SCHEMA, json_schema=schema)


def _emit(c: psycopg.Connection[Any], event_type: str, payload: Any) -> None:
    c.execute("SELECT outbox.emit(%s, %s::jsonb)", (event_type, json.dumps(payload)))


@pytest.mark.parametrize(("payload", "where"), [
    ({"amount": "12"}, r'at \$\.amount: "12" is not of type "integer"'),
    ({"amount": 1.5}, r"at \$\.amount: 1\.5 is not of type"),
    ({"amount": -1}, r"at \$\.amount: -1 is less than the minimum of 0"),
    ({}, r'at \$: "amount" is a required property'),
    ({"amount": 1, "x": 2}, r'at \$: additional property "x" is not allowed'),
    ({"amount": 1, "lines": [{"sku": "a"}, {}]}, r'at \$\.lines\[1\]: "sku" is a required'),
    ({"amount": 1, "lines": [{"sku": "A"}]}, r'at \$\.lines\[0\]\.sku: "A" does not match'),
    ({"amount": 1, "odd key": "abc"}, r'at \$\["odd key"\]: "abc" is longer than 2'),
    ([], r"at \$: \[\] is not of type \"object\""),
])
def test_a_bad_payload_is_refused_with_its_path_and_nothing_written(
        db_url: str, payload: Any, where: str) -> None:
    _register(db_url, "invoice.paid", INVOICE)
    with psycopg.connect(db_url) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"payload of 'invoice\.paid' does not match its schema "
                                 + where):
            _emit(c, "invoice.paid", payload)
        c.rollback()
        _emit(c, "invoice.paid", {"amount": 3, "lines": [{"sku": "tea", "quantity": 2}]})
        _emit(c, "other.type", {"amount": "free"})  # no schema: not checked
        c.commit()
    assert count(db_url, "events") == 2


def test_modes_warn_off_and_required_registration(db_url: str) -> None:
    _register(db_url, "invoice.paid", INVOICE)
    with psycopg.connect(db_url, autocommit=True) as c:
        notices: list[str] = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        c.execute("SET outbox.validate = warn")
        _emit(c, "invoice.paid", {"amount": "12"})
        assert notices == ["payload of 'invoice.paid' does not match its schema at $.amount:"
                           ' "12" is not of type "integer" (outbox.validate = warn: emitted'
                           " anyway)"]
        c.execute("SET outbox.validate = off")
        _emit(c, "invoice.paid", {"amount": "13"})
        c.execute("SET outbox.validate = loose")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"strict, warn or off"):
            _emit(c, "invoice.paid", {"amount": 1})
        c.execute("RESET outbox.validate")
        c.execute("SET outbox.require_registered_types = true")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"event type 'other\.type' is not registered in the catalog"):
            _emit(c, "other.type", {})
        _emit(c, "invoice.paid", {"amount": 1})
    assert count(db_url, "events") == 3


def test_a_captured_write_that_does_not_match_fails(db_url: str) -> None:
    execute(db_url, "CREATE TABLE public.orders (id int PRIMARY KEY, total numeric)")
    execute(db_url, "SELECT outbox.capture_add('public.orders', 'order.changed')")
    _register(db_url, "order.changed", {
        "type": "object", "properties": {"new": {"anyOf": [
            {"type": "null"}, {"type": "object", "properties": {
                "total": {"type": "number", "exclusiveMinimum": 0}}}]}}})
    execute(db_url, "INSERT INTO public.orders VALUES (1, 9.5)")
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match=r"at \$\.new: .* is not valid under any of the schemas"):
        execute(db_url, "INSERT INTO public.orders VALUES (2, 0)")
    assert execute(db_url, "SELECT id FROM public.orders") == [(1,)]
    assert count(db_url, "events") == 1


def test_a_keyword_it_cannot_check_is_refused_not_passed(db_url: str) -> None:
    _register(db_url, "tag.added", {"type": "object", "unevaluatedProperties": False})
    execute(db_url, "INSERT INTO outbox.event_types (name, json_schema) VALUES"  # as psql could
                    " ('tag.moved', '{\"$ref\": \"https://example.com/tag.json\"}')")
    with psycopg.connect(db_url) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"the keyword unevaluatedProperties cannot be checked by the"
                                 r" SQL emit"):
            _emit(c, "tag.added", {})
        c.rollback()
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"the \$ref https://example\.com/tag\.json cannot be checked"):
            _emit(c, "tag.moved", {})
    assert count(db_url, "events") == 0


# Schemas covering every keyword the SQL check knows; payloads drawn around them.
SCHEMAS: list[dict[str, Any]] = [
    INVOICE,
    {"type": ["integer", "null"], "multipleOf": 3, "maximum": 30, "exclusiveMinimum": -9},
    {"type": "number", "exclusiveMaximum": 2.5, "minimum": -1.5},
    {"enum": [1, "a", None, [1, 2], {"k": True}]},
    {"const": {"k": [1, "a"]}},
    {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[ab]+$"},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
     "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4},
    {"type": "array", "uniqueItems": True, "contains": {"type": "integer", "minimum": 2},
     "minContains": 1, "maxContains": 2},
    {"type": "array", "items": False, "prefixItems": [True]},
    {"type": "object", "minProperties": 1, "maxProperties": 2,
     "propertyNames": {"pattern": "^[a-z]+$"},
     "patternProperties": {"^k": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
    {"type": "object", "dependentRequired": {"k": ["a"]},
     "dependentSchemas": {"a": {"properties": {"k": {"const": 1}}}}},
    {"allOf": [{"type": "object"}, {"required": ["k"]}],
     "anyOf": [{"properties": {"k": {"type": "integer"}}},
               {"properties": {"k": {"type": "string"}}}]},
    {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 2}]},
    {"not": {"type": "string"}, "if": {"type": "integer"}, "then": {"minimum": 0},
     "else": {"type": "array"}},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                        "next": {"$ref": "#/$defs/node"}},
                        "required": ["v"]}}, "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"a": False, "b": True}},
]

# Payloads each schema accepts (the random ones mostly fail): every accepting path taken.
VALID: list[list[Any]] = [
    [{"amount": 0}, {"amount": 2, "lines": [{"sku": "a", "quantity": 1}], "odd key": "ab"}],
    [None, 0, 3, 30, -6, 3.0], [-1.5, 0, 2.4999], [1, "a", None, [1, 2], {"k": True}, 1.0],
    [{"k": [1, "a"]}], ["a", "ab", "bab"], [["a"], ["a", 1], ["a", 1, True, False]],
    [[2], [1, 2, "x", 3], [2.5, 3]], [[], [{"any": 1}]],
    [{"k": 1}, {"kk": 2, "a": "x"}, {"b": "y"}], [{}, {"a": 1, "k": 1}, {"b": 2}],
    [{"k": 1}, {"k": "x", "a": None}], [1, 2.5, 0], [1, 0, [], [1]],
    [{"v": 1}, {"v": 1, "next": {"v": 2, "next": {"v": 3}}}], [{}, {"b": [1]}],
]
scalars = (st.none() | st.booleans() | st.integers(-12, 40) | st.sampled_from(
    [-1.5, 0.5, 1.0, 2.5, 3.0, 2.4999]) | st.sampled_from(["", "a", "ab", "abc", "abab", "A"]))
keys = st.sampled_from(["amount", "lines", "odd key", "sku", "quantity", "k", "a", "b", "v",
                        "next", "kk", "X"])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(index=st.integers(0, len(SCHEMAS) - 1),
       payload=values | st.sampled_from([p for ps in VALID for p in ps]))
def test_the_sql_check_agrees_with_the_python_check(db_url: str, index: int,
                                                    payload: Any) -> None:
    schema = SCHEMAS[index]
    python = compile_schema(schema)(payload)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"SET search_path = {SCHEMA}".encode())
        row = c.execute("SELECT schema_problem(%s::jsonb, %s::jsonb, '$', %s::jsonb)",
                        (json.dumps(schema), json.dumps(payload), json.dumps(schema))).fetchone()
    assert row is not None
    assert (row[0] is None) == (python is None), (schema, payload, row[0], python)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_both_checks_accept_the_valid_payloads(db_url: str, index: int) -> None:
    check = compile_schema(SCHEMAS[index])
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"SET search_path = {SCHEMA}".encode())
        for payload in VALID[index]:
            assert check(payload) is None, payload
            row = c.execute("SELECT schema_problem(%s::jsonb, %s::jsonb, '$', %s::jsonb)",
                            (json.dumps(SCHEMAS[index]), json.dumps(payload),
                             json.dumps(SCHEMAS[index]))).fetchone()
            assert row == (None,), payload
