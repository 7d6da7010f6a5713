"""RawStatement: the claim and completion converted to $n once, as psycopg converts them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from psycopg._queries import PostgresQuery, PostgresRawQuery
from psycopg.adapt import Transformer

from outbox._db.connection import render
from outbox.delivery import queries
from outbox.delivery.raw import RawStatement


def test_each_name_is_one_placeholder_in_order_of_first_use() -> None:
    st = RawStatement("SELECT %(b)s, %(a)s, %(b)s::int")
    assert st.text == "SELECT $1, $2, $1::int"
    assert st.names == ("b", "a")
    assert st.params({"a": 1, "b": 2, "unused": 3}) == [2, 1]


def test_a_doubled_percent_is_a_literal_percent() -> None:
    assert RawStatement("SELECT 'x%%' LIKE %(p)s").text == "SELECT 'x%' LIKE $1"


@pytest.mark.parametrize("sql", ["SELECT %s", "SELECT %(a)b", "SELECT %(a)t", "SELECT 5 % 2"])
def test_other_placeholders_are_refused(sql: str) -> None:
    with pytest.raises(ValueError, match="only %\\(name\\)s placeholders"):
        RawStatement(sql)


def test_a_missing_value_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        RawStatement("SELECT %(a)s").params({})


CLAIM_VALUES: dict[str, Any] = {
    "limit": 36, "lease": 300.0, "token": uuid.uuid4(), "used_ids": [uuid.uuid4()],
    "used_counts": [3], "default_cap": 100, "floor": -(1 << 63), "after": str(uuid.uuid4())}
COMPLETE_VALUES: dict[str, Any] = {
    "ids": [1], "tokens": [uuid.uuid4()], "states": ["delivered"], "delays": [0.0],
    "refunds": [0], "statuses": [200], "errors": [None], "outcomes": ["delivered"],
    "attempts": [1], "durations": [1.5], "classes": [None], "excerpts": [""], "gone": [],
    "worker": "w", "failing_after": 5}


@pytest.mark.parametrize(("statement", "values"), [
    (queries.CLAIM, CLAIM_VALUES), (queries.COMPLETE, COMPLETE_VALUES)])
def test_the_worker_statements_convert_as_psycopg_converts_them(
        statement: str, values: dict[str, Any]) -> None:
    """The server gets the same text and the same parameter types as from the named form."""
    sql = render(statement, "outbox")
    raw = RawStatement(sql)
    named = PostgresQuery(Transformer())
    named.convert(sql, values)
    positional = PostgresRawQuery(Transformer())
    positional.convert(raw.text, raw.params(values))
    assert positional.query == named.query == raw.text.encode()
    assert positional.types == named.types
    assert positional.params == named.params
    assert len(raw.text) > 4096  # why: psycopg caches conversions of at most 4 kB only
