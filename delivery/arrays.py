"""PostgreSQL array literals for the worker's batched completion, built with ``str.join``.

psycopg dumps a list parameter element by element in Python (its array dumpers): for the
twelve arrays of the completion (:data:`outbox.delivery.queries.COMPLETE`) that was ~4.7 us
a recorded delivery, about 3% of a busy worker's CPU. These functions write the same arrays
as text in PostgreSQL's array input syntax instead, one ``str.join`` each, and the
statement casts every such parameter to its array type (``%(ids)s::bigint[]``...), so the
server reads exactly the values given, typed as before:

- integers: ``str`` of each; floats: ``repr`` of each, the shortest text that reads back
  as the same float8 (``inf``, ``-inf`` and ``nan`` are float8 input too; an int where a
  float is expected is its digits);
- text: each element double-quoted with ``\\`` and ``"`` backslash-escaped, so a value
  that reads ``NULL`` or holds braces, commas, quotes or spaces is that text;
- UUIDs: their 32 hex digits;
- None, in any of them: ``NULL`` (unquoted).

A value of another type fails the statement with the server's input error (a DataError,
as a mistyped list would), never reads as something else: ``str(True)`` is no integer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

__all__ = ["floats", "integers", "texts", "uuids"]


def integers(values: Iterable[int | None]) -> str:
    """``{1,NULL,3}``: an ``int[]``/``bigint[]`` literal."""
    return "{" + ",".join(["NULL" if v is None else str(v) for v in values]) + "}"


def floats(values: Iterable[float | None]) -> str:
    """``{0.0,1.5,inf,NULL}``: a ``float8[]`` literal (exact: ``repr`` round-trips)."""
    return "{" + ",".join(["NULL" if v is None else repr(v) for v in values]) + "}"


def texts(values: Iterable[str | None]) -> str:
    """``{"a","say \\"hi\\"",NULL}``: a ``text[]`` literal, every element quoted."""
    return "{" + ",".join([
        "NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for v in values]) + "}"


def uuids(values: Iterable[uuid.UUID | None]) -> str:
    """``{01890a5d...,NULL}``: a ``uuid[]`` literal (32 hex digits each, a form the
    server reads as well as the hyphenated one, and cheaper to write)."""
    return "{" + ",".join(["NULL" if v is None else v.hex for v in values]) + "}"
