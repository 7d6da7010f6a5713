"""The completion's array literals (outbox.delivery.arrays) read back as the values given."""

from __future__ import annotations

import math
import uuid
from typing import Any

import psycopg
import pytest

from outbox.delivery import arrays

TEXTS = ["", "NULL", "null", "a,b", "{x}", '"quoted"', "back\\slash", "\\\"", " spaced ",
         "tab\there", "new\nline", "ünïcödé ✓", "'single'", "}{,\"\\", "a" * 5000, None]
FLOATS = [0.0, -0.0, 1.5, 0.1, 1e-320, 1.7976931348623157e308, -2.5e-5, 1 / 3,
          math.inf, -math.inf, None, 7]
INTEGERS = [0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), None]
UUIDS = [uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), None]


def _read(db_url: str, literal: str, cast: str) -> list[Any]:
    with psycopg.connect(db_url, autocommit=True) as c:
        row = c.execute(f"SELECT %s::{cast}".encode(), (literal,)).fetchone()
    assert row is not None
    return list(row[0])


def test_texts_read_back_as_given(db_url: str) -> None:
    assert _read(db_url, arrays.texts(TEXTS), "text[]") == TEXTS


def test_floats_read_back_exactly(db_url: str) -> None:
    got = _read(db_url, arrays.floats(FLOATS), "float8[]")
    assert got == [None if v is None else float(v) for v in FLOATS]
    assert math.copysign(1.0, got[1]) == -1.0  # -0.0 stays negative
    nan = _read(db_url, arrays.floats([math.nan]), "float8[]")
    assert math.isnan(nan[0])


def test_integers_and_uuids_read_back_as_given(db_url: str) -> None:
    assert _read(db_url, arrays.integers(INTEGERS), "bigint[]") == INTEGERS
    assert _read(db_url, arrays.uuids(UUIDS), "uuid[]") == UUIDS


def test_empty_arrays(db_url: str) -> None:
    for literal, cast in [(arrays.texts([]), "text[]"), (arrays.floats([]), "float8[]"),
                          (arrays.integers([]), "int[]"), (arrays.uuids([]), "uuid[]")]:
        assert _read(db_url, literal, cast) == []


def test_a_value_of_another_type_fails_the_statement(db_url: str) -> None:
    """Never read as something else: the server's input error, a DataError (the
    completion's poison isolation splits a batch on it)."""
    with pytest.raises(psycopg.DataError):
        _read(db_url, arrays.integers([True]), "bigint[]")
    with pytest.raises(psycopg.DataError):
        _read(db_url, arrays.integers([2**63]), "bigint[]")
