"""The database's evaluation of a compiled payload filter (the one routing uses) agrees with
a pure-Python evaluation of the same filter from its documented semantics
(tests/support/filter_eval.py), over random filters and payloads."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox._db.queries.emit import payload_doc
from outbox.admin.filters import compile_filter
from tests.support import filter_eval

KEYS = ["a", "b", "c", "0"]
PATHS = ["a", "b", "a.b", "a.0", "b.a.b", "c"]
STRINGS = ["", "x", "X", "xy", "é", "€", "1", 'q"', "\\", "\n", "\x1f", "😀", "a b"]
NUMBERS = [0, 1, -1, 2, 10, 0.5, 1.0, -2.25, 1000.0, 1e20, 12345678901234567890]

# A few common values (so that filters and payloads meet often), then the edges.
COMMON = [1, "x"]
scalars = (st.sampled_from(COMMON) | st.none() | st.booleans() | st.sampled_from(NUMBERS)
           | st.sampled_from(STRINGS))


def _pick(*weighted: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, by weight (st.one_of weighs the branches it flattens)."""
    table = [s for w, s in weighted for _ in range(w)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def _payloads(pool: list[Any]) -> st.SearchStrategy[Any]:
    """Payloads whose scalars are mostly the filter's own operands (``pool``), so that
    filters and payloads meet; arrays (of scalars, arrays, objects), objects two deep."""
    some = _pick((2, st.sampled_from(pool)), (1, scalars)) if pool else scalars
    inner = _pick((3, some), (1, st.lists(some, max_size=2)))
    nested = st.dictionaries(st.sampled_from(KEYS), inner, max_size=2)
    values = _pick((4, some), (1, st.lists(_pick((2, inner), (1, nested)), max_size=3)),
                   (1, nested))
    objects = st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=4)
    return _pick((5, objects), (1, values))


def _operands(spec: Any) -> list[Any]:
    if isinstance(spec, dict):
        return [x for v in spec.values() for x in _operands(v)]
    if isinstance(spec, list):
        return [x for v in spec for x in _operands(v)]
    return [spec]


ordered = st.sampled_from([1, 2, "x", "é"]) | st.sampled_from(NUMBERS) | st.sampled_from(
    STRINGS)


def _ops() -> st.SearchStrategy[dict[str, Any]]:
    one = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$neq"]), scalars),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(scalars, min_size=1, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ordered),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    return st.lists(one, min_size=1, max_size=2, unique_by=lambda t: t[0]).map(dict)


leaf = st.dictionaries(st.sampled_from(PATHS), scalars | _ops(), min_size=1, max_size=1)
filters = st.recursive(
    leaf,
    lambda inner: st.builds(lambda op, items: {op: items}, st.sampled_from(["$and", "$or"]),
                            st.lists(inner, min_size=1, max_size=3)),
    max_leaves=6)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=filters, data=st.data())
def test_the_database_evaluates_filters_as_documented(
        db_url: str, spec: dict[str, Any], data: st.DataObject) -> None:
    docs = data.draw(st.lists(_payloads(_operands(spec)), min_size=1, max_size=8))
    path = compile_filter(spec).path
    texts = [json.dumps(d, ensure_ascii=False) for d in docs]
    with psycopg.connect(db_url) as c:
        row = c.execute(
            f"SELECT array_agg(COALESCE({payload_doc('t.doc')} @@ %(path)s::jsonpath, false)"
            " ORDER BY t.n) FROM unnest(%(docs)s::json[]) WITH ORDINALITY AS t(doc, n)",
            {"path": path, "docs": texts}).fetchone()
    assert row is not None
    expected = [filter_eval.matches(spec, json.loads(t, parse_float=Decimal)) for t in texts]
    assert row[0] == expected, (spec, path, texts)
