"""Event validation: every refusal is an InvalidEvent with a reason, before any SQL."""

from __future__ import annotations

import math
from typing import Any

import pytest

from outbox import Event, InvalidEvent
from outbox._emit.event import prepare

LIMIT = 1024


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (Event("", {}), "non-empty"),
        (Event("a" * 129, {}), "over 128"),
        (Event("invoice paid", {}), "malformed"),
        (Event("invoice\npaid", {}), "malformed"),
        (Event("invoice.paid\n", {}), "malformed"),  # as the SQL emit refuses it
        (Event(".leading", {}), "malformed"),
        (Event("x", {1, 2}), "not JSON-serialisable"),
        (Event("x", {"when": object()}), "not JSON-serialisable"),
        (Event("x", {"n": math.nan}), "not JSON-serialisable"),
        (Event("x", {"n": math.inf}), "not JSON-serialisable"),
        (Event("x", "a" * LIMIT), "over the 1024-byte limit"),
        (Event("x", {}, key=""), "key must be a non-empty"),
        (Event("x", {}, idempotency_key="a\x00b"), "control characters"),
        (Event("x", {}, idempotency_key="k" * 256), "over 255"),
    ],
)
def test_refused(event: Event, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        prepare(event, LIMIT)


def test_not_an_event() -> None:
    bad: Any = {"type": "x", "payload": {}}
    with pytest.raises(InvalidEvent, match=r"expected outbox\.Event"):
        prepare(bad, LIMIT)


def test_size_limit_counts_utf8_bytes() -> None:
    # 400 three-byte characters: 1200 bytes although only 402 characters once quoted
    with pytest.raises(InvalidEvent, match="1202 bytes"):
        prepare(Event("x", "€" * 400), LIMIT)
    assert prepare(Event("x", "€" * 300), LIMIT).payload == '"' + "€" * 300 + '"'


@pytest.mark.parametrize("name", ["invoice.paid", "user:created", "a/b-c_d", "X1"])
def test_accepted_types(name: str) -> None:
    ev = prepare(Event(name, {"a": [1, 2.5, None, True]}), LIMIT)
    assert ev.type == name
    assert ev.payload == '{"a":[1,2.5,null,true]}'


def test_ids_are_time_ordered_and_dot_free() -> None:
    ids = [prepare(Event("x", {}), LIMIT).id for _ in range(50)]
    assert ids == sorted(ids)
    assert all(i.version == 7 and "." not in str(i) for i in ids)
