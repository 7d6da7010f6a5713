"""Payload filters: which events of its types an endpoint receives (docs/guides/filters.md).

A filter is a JSON object checked and compiled here, at registration, into a PostgreSQL
jsonpath predicate stored beside it (``endpoints.filter_path``, migration 0017). That
predicate is the ONE evaluator: emit's routing (the Python emit and the SQL function
``outbox.emit``, outbox/_db/queries/emit.py) runs ``payload::jsonb @@ filter_path`` for each
endpoint in scope whose type filter takes the event, so a non-matching endpoint gets no
delivery row; :func:`try_filter` runs the same stored path on a sample in the database.

Grammar (every refusal is :class:`~outbox.errors.InvalidEndpoint` naming the bad part,
e.g. ``filter.$or[1].amount.$gt``, before anything is written):

- a filter is a non-empty object; its entries all hold (AND);
- ``"$and": [filter, ...]`` / ``"$or": [filter, ...]``: non-empty lists of filters;
- ``"dotted.path": scalar`` is ``{"$eq": scalar}``;
- ``"dotted.path": {"$op": operand, ...}``: every operator holds. ``$eq``/``$neq``: a
  scalar (string, number, true, false, null); ``$in``/``$nin``: a non-empty list of
  scalars; ``$gt``/``$gte``/``$lt``/``$lte``: a number or a string; ``$exists``: a boolean.

Semantics (PostgreSQL's lax jsonpath, which :func:`compile_filter` relies on):

- a path's segments are object keys (``items.0`` is the key ``"0"``, not an index); a
  missing key, or a step into a non-object, gives nothing; a step into an array looks in
  each of its objects (one level);
- a comparison holds if ANY value at the path satisfies it, looking one level into arrays
  (twice for a value that is itself an element of an array) -- ``{"tags": "red"}`` matches
  ``{"tags": ["red", "blue"]}``; a path that gives nothing holds no comparison;
- values of different JSON types never compare: ``1`` vs ``"1"``, ``true`` vs ``1``,
  ``$gt: 5`` on a string are all false, never an error; numbers compare exactly as
  decimals (``1`` equals ``1.0``); strings compare by Unicode code point;
- ``$neq`` is ``NOT $eq`` and ``$nin`` is ``NOT $in``: they hold for a missing path and for
  a value of another type; ``$exists: true`` holds for any value, ``null`` included;
- a payload that is not an object (an array's objects aside) has no paths; a payload
  holding a NUL character (``\\u0000``, which jsonb cannot hold) matches no filter.

Limits: :data:`FILTER_MAX_BYTES` of compact JSON, :data:`FILTER_MAX_DEPTH` levels of
``$and``/``$or``, :data:`FILTER_MAX_CONDITIONS` operators in all, :data:`IN_MAX_VALUES`
values per ``$in``, paths of at most :data:`PATH_MAX_SEGMENTS` segments of at most
:data:`SEGMENT_MAX_CHARS` characters without control characters, not starting with ``$``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import class_row, tuple_row
from psycopg.types.json import Jsonb

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox.admin._endpoint_types import Endpoint
from outbox.errors import EndpointNotFound, InvalidEndpoint

__all__ = [
    "COMPARISONS",
    "FILTER_MAX_BYTES",
    "FILTER_MAX_CONDITIONS",
    "FILTER_MAX_DEPTH",
    "IN_MAX_VALUES",
    "OPERATORS",
    "PATH_MAX_SEGMENTS",
    "SEGMENT_MAX_CHARS",
    "Compiled",
    "FilterTest",
    "compile_filter",
    "filter_params",
    "try_filter",
]

FILTER_MAX_BYTES = 4096
FILTER_MAX_DEPTH = 4
FILTER_MAX_CONDITIONS = 64
IN_MAX_VALUES = 100
PATH_MAX_SEGMENTS = 16
SEGMENT_MAX_CHARS = 128
COMPARISONS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
OPERATORS = ("$eq", "$neq", "$in", "$nin", *COMPARISONS, "$exists")
_LOGICAL = {"$and": " && ", "$or": " || "}


@dataclass(frozen=True, slots=True)
class Compiled:
    """A checked filter: as given (``filter``), its jsonpath predicate (``path``), and one
    predicate per top-level condition (``clauses``: (label, path)), for explaining."""

    filter: dict[str, Any]
    path: str
    clauses: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class FilterTest:
    """:func:`try_filter`'s answer: ``matches`` (always True without a filter), and each
    top-level condition with whether it held (empty without a filter)."""

    matches: bool
    filter: dict[str, Any] | None
    conditions: tuple[tuple[str, bool], ...]


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, where: str) -> None:
        self.n += 1
        if self.n > FILTER_MAX_CONDITIONS:
            raise InvalidEndpoint(f"{where}: the filter has over {FILTER_MAX_CONDITIONS}"
                                  " conditions")


def compile_filter(spec: Any) -> Compiled:
    """Check ``spec`` (a JSON object, or its text) and compile it; InvalidEndpoint naming the
    bad part otherwise."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec, parse_constant=_no_constant)
        except ValueError as exc:
            raise InvalidEndpoint(f"filter is not valid JSON: {exc}") from None
    if not isinstance(spec, Mapping):
        raise InvalidEndpoint(f"filter must be a JSON object, not {_kind(spec)}")
    try:
        text = json.dumps(spec, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(text.encode())
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise InvalidEndpoint(f"filter is not plain JSON: {exc}") from None
    if size > FILTER_MAX_BYTES:
        raise InvalidEndpoint(f"filter is {size} bytes of JSON, over {FILTER_MAX_BYTES}")
    counter = _Counter()
    clauses = _object(spec, "filter", 1, counter)
    path = " && ".join(f"({p})" for _, p in clauses) if len(clauses) > 1 else clauses[0][1]
    return Compiled(json.loads(text), path, tuple(clauses))


def filter_params(spec: Any, clear: bool = False) -> dict[str, Any]:
    """The SQL parameters of ``add``/``update``: ``set_filter`` (whether to write),
    ``filter`` and ``filter_path`` (both None: no filter). Refuses both a filter and
    ``clear``."""
    if clear and spec is not None:
        raise InvalidEndpoint("give a filter or clear the filter, not both")
    if spec is None:
        return {"set_filter": clear, "filter": None, "filter_path": None}
    compiled = compile_filter(spec)
    return {"set_filter": True, "filter": Jsonb(compiled.filter),
            "filter_path": compiled.path}


def try_filter(conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID,
                payload: Any, *, schema: str, tenant: str | None = None) -> FilterTest:
    """Whether ``payload`` (a JSON value) matches the endpoint's stored filter, by the
    routing's own evaluator (its stored jsonpath, run in the database), and which top-level
    conditions hold. With ``tenant``, an endpoint of another tenant (or of every tenant) is
    :class:`EndpointNotFound`. Reads only."""
    try:
        eid = endpoint_id if isinstance(endpoint_id, uuid.UUID) else uuid.UUID(endpoint_id)
    except ValueError:
        raise EndpointNotFound(f"no endpoint {endpoint_id!r} (ids look like a UUID)") from None
    with translated(), conn.cursor(row_factory=class_row(Endpoint)) as cur:
        ep = cur.execute(render(queries.ENDPOINT_GET, schema), (eid,)).fetchone()
    if ep is None or (tenant is not None and (ep.tenant != tenant or ep.all_tenants)):
        raise EndpointNotFound(f"no endpoint {eid}")
    try:
        doc = json.dumps(payload, allow_nan=False)
    except (ValueError, TypeError) as exc:
        raise InvalidEndpoint(f"payload is not plain JSON: {exc}") from None
    if ep.filter is None:
        return FilterTest(True, None, ())
    clauses = compile_filter(ep.filter).clauses
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(render(queries.ENDPOINT_TEST_FILTER, schema),
                          {"id": ep.id, "doc": doc,
                           "paths": [p for _, p in clauses]}).fetchone()
    if row is None:
        raise EndpointNotFound(f"no endpoint {ep.id}")
    held = [bool(h) for h in row[1]]
    return FilterTest(bool(row[0]), ep.filter,
                      tuple((label, h) for (label, _), h in zip(clauses, held, strict=True)))


# --- checking and compiling -----------------------------------------------------------
def _object(spec: Mapping[Any, Any], where: str, depth: int, counter: _Counter
            ) -> list[tuple[str, str]]:
    """(label, predicate) per entry of a filter object."""
    if depth > FILTER_MAX_DEPTH:
        raise InvalidEndpoint(f"{where}: $and/$or nested over {FILTER_MAX_DEPTH} levels")
    if not spec:
        raise InvalidEndpoint(f"{where}: an empty filter object (to remove a filter, clear"
                              " it instead)")
    out = []
    for key, value in spec.items():
        here = f"{where}.{key}"
        if key in _LOGICAL:
            out.append((key, _logical(key, value, here, depth, counter)))
        elif isinstance(key, str) and key.startswith("$"):
            raise InvalidEndpoint(f"{here}: unknown operator {key!r} here (a filter object"
                                  " takes $and, $or and dotted paths)")
        else:
            out.append((key, _field(_path(key, here), value, here, counter)))
    return out


def _logical(op: str, value: Any, where: str, depth: int, counter: _Counter) -> str:
    if not isinstance(value, list) or not value:
        raise InvalidEndpoint(f"{where}: must be a non-empty list of filter objects,"
                              f" not {_kind(value)}")
    parts = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise InvalidEndpoint(f"{where}[{i}]: must be a filter object, not {_kind(item)}")
        clauses = _object(item, f"{where}[{i}]", depth + 1, counter)
        parts.append("(" + " && ".join(f"({p})" for _, p in clauses) + ")")
    return "(" + _LOGICAL[op].join(parts) + ")"


def _path(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidEndpoint(f"{where}: a path must be a non-empty dotted string")
    segments = key.split(".")
    if len(segments) > PATH_MAX_SEGMENTS:
        raise InvalidEndpoint(f"{where}: the path has {len(segments)} segments, over"
                              f" {PATH_MAX_SEGMENTS}")
    for seg in segments:
        if not seg:
            raise InvalidEndpoint(f"{where}: the path has an empty segment")
        if len(seg) > SEGMENT_MAX_CHARS:
            raise InvalidEndpoint(f"{where}: a path segment is {len(seg)} characters, over"
                                  f" {SEGMENT_MAX_CHARS}")
        if seg.startswith("$"):
            raise InvalidEndpoint(f"{where}: a path segment must not start with '$'")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in seg):
            raise InvalidEndpoint(f"{where}: the path has a control character")
    return "$" + "".join("." + _string(seg, where) for seg in segments)


def _field(path: str, value: Any, where: str, counter: _Counter) -> str:
    if not isinstance(value, Mapping):
        counter.add(where)
        return _test(path, "$eq", value, where)
    if not value:
        raise InvalidEndpoint(f"{where}: an empty operator object")
    parts = []
    for op, operand in value.items():
        if op not in OPERATORS:
            hint = (" (to reach a nested key, use a dotted path, e.g. 'a.b')"
                    if isinstance(op, str) and not op.startswith("$") else "")
            raise InvalidEndpoint(f"{where}: unknown operator {op!r}; use one of"
                                  f" {', '.join(OPERATORS)}{hint}")
        counter.add(where)
        parts.append(_test(path, op, operand, f"{where}.{op}"))
    return parts[0] if len(parts) == 1 else " && ".join(f"({p})" for p in parts)


def _test(path: str, op: str, operand: Any, where: str) -> str:
    if op == "$exists":
        if not isinstance(operand, bool):
            raise InvalidEndpoint(f"{where}: must be true or false, not {_kind(operand)}")
        return f"exists({path})" if operand else f"!(exists({path}))"
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand:
            raise InvalidEndpoint(f"{where}: must be a non-empty list of values, not"
                                  f" {_kind(operand)}")
        if len(operand) > IN_MAX_VALUES:
            raise InvalidEndpoint(f"{where}: {len(operand)} values, over {IN_MAX_VALUES}")
        test = " || ".join(f"@ == {_scalar(v, f'{where}[{i}]')}"
                           for i, v in enumerate(operand))
        found = f"exists({path} ? ({test}))"
        return found if op == "$in" else f"!({found})"
    if op in COMPARISONS:
        if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            raise InvalidEndpoint(f"{where}: must be a number or a string, not"
                                  f" {_kind(operand)}")
        return f"exists({path} ? (@ {COMPARISONS[op]} {_scalar(operand, where)}))"
    found = f"exists({path} ? (@ == {_scalar(operand, where)}))"
    return found if op == "$eq" else f"!({found})"


def _scalar(value: Any, where: str) -> str:
    """``value`` as a jsonpath literal."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEndpoint(f"{where}: numbers must be finite")
        return _decimal(value)
    if isinstance(value, str):
        return _string(value, where)
    raise InvalidEndpoint(f"{where}: must be a string, a number, true, false or null, not"
                          f" {_kind(value)} (objects and arrays do not compare)")


def _decimal(value: float) -> str:
    """The shortest decimal reading back as ``value``, without an exponent."""
    text = repr(value)
    return format(Decimal(text), "f") if "e" in text else text


def _string(value: str, where: str) -> str:
    if "\x00" in value:
        raise InvalidEndpoint(f"{where}: a NUL character (PostgreSQL's jsonb cannot hold"
                              " one)")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidEndpoint(f"{where}: a lone surrogate is not text") from None
    return json.dumps(value, ensure_ascii=False)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return next((n for t, n in names.items() if isinstance(value, t)), type(value).__name__)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
