"""A pure-Python evaluation of a payload filter, written from the documented semantics
(docs/guides/filters.md, outbox.admin.filters), independent of the jsonpath compiler: the
property tests compare the database's evaluation of the compiled filter against it.
Payloads are parsed with exact decimals (``json.loads(text, parse_float=Decimal)``)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": lambda a, b: bool(a > b), "$gte": lambda a, b: bool(a >= b),
    "$lt": lambda a, b: bool(a < b), "$lte": lambda a, b: bool(a <= b)}


def matches(spec: dict[str, Any], doc: Any) -> bool:
    """Whether ``doc`` matches ``spec``: every entry holds."""
    return all(_entry(k, v, doc) for k, v in spec.items())


def _entry(key: str, value: Any, doc: Any) -> bool:
    if key == "$and":
        return all(matches(s, doc) for s in value)
    if key == "$or":
        return any(matches(s, doc) for s in value)
    found = _walk(doc, key.split("."))
    ops = value if isinstance(value, dict) else {"$eq": value}
    return all(_op(op, arg, found) for op, arg in ops.items())


def _walk(doc: Any, segments: list[str]) -> list[Any]:
    """The values at a dotted path: a step into an array looks in each of its objects."""
    items = [doc]
    for seg in segments:
        nxt = []
        for it in items:
            for obj in (it if isinstance(it, list) else [it]):
                if isinstance(obj, dict) and seg in obj:
                    nxt.append(obj[seg])
        items = nxt
    return items


def _candidates(found: list[Any]) -> list[Any]:
    """The values a comparison looks at: one level into arrays, then one more."""
    level1 = [x for it in found for x in (it if isinstance(it, list) else [it])]
    return [x for it in level1 for x in (it if isinstance(it, list) else [it])]


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float | Decimal):
        return "number"
    if isinstance(v, str):
        return "string"
    return "other"


def _num(v: Any) -> Any:
    return Decimal(repr(v)) if isinstance(v, float) else v


def _eq(a: Any, b: Any) -> bool:
    k = _kind(a)
    if k != _kind(b) or k == "other":
        return False
    return bool(_num(a) == _num(b)) if k == "number" else bool(a == b)


def _op(op: str, arg: Any, found: list[Any]) -> bool:
    if op == "$exists":
        return bool(found) is bool(arg)
    values = _candidates(found)
    if op in ("$eq", "$neq"):
        hit = any(_eq(v, arg) for v in values)
        return hit if op == "$eq" else not hit
    if op in ("$in", "$nin"):
        hit = any(_eq(v, a) for v in values for a in arg)
        return hit if op == "$in" else not hit
    cmp = _ORDER[op]
    return any(_kind(v) == _kind(arg) and cmp(_num(v), _num(arg)) for v in values)
