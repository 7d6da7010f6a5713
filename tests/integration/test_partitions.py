"""Partitioned delivery history (migrations/0018): partitions made ahead and dropped behind,
never while a row in them must survive; what crosses a partition boundary keeps working."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import psycopg
import pytest

import outbox
from outbox.admin import partitions as parts
from outbox.admin import replay as replay_lib
from outbox.admin.deadletter import Selection, list_dead
from outbox.admin.retention import prune
from outbox.testing.receiver import Receiver
from tests.support.cli import invoke
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, drain, emit, rows, settings, states

NOW = dt.timedelta(0)


def _next_partition(db_url: str) -> None:
    """Close the open partition now and open the next (as the worker does once the open one
    is OUTBOX_PARTITION_SECONDS old), without waiting that long."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.delivery_partitions SET opened_at = opened_at - interval '1d'"
                  " WHERE opened_at IS NOT NULL AND closed_at IS NULL")
        parts.advance(c, SCHEMA, dt.timedelta(hours=1))


def _status(db_url: str, retention: dt.timedelta = NOW,
            dead: dt.timedelta | None = None) -> dict[str, str | None]:
    with psycopg.connect(db_url, autocommit=True) as c:
        return {p.deliveries: p.blocked_by for p in parts.status(c, SCHEMA, retention, dead)}


def _drop(db_url: str, retention: dt.timedelta = NOW,
          dead: dt.timedelta | None = None) -> parts.DropResult:
    with psycopg.connect(db_url, autocommit=True) as c:
        return parts.drop_expired(c, SCHEMA, retention, dead)


def _partition_of(db_url: str, delivery_id: int) -> str:
    ((name,),) = rows(db_url, "SELECT tableoid::regclass::text FROM outbox.deliveries"
                              " WHERE id = %s", (delivery_id,))
    return str(name).removeprefix("outbox.")


def _finish(db_url: str, state: str, where: str = "TRUE") -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"UPDATE outbox.deliveries SET state = '{state}', finished_at = now()"
                  f" WHERE {where}".encode())


def test_migration_makes_partitions_ahead_and_emits_go_to_the_open_one(db_url: str) -> None:
    status = _status(db_url)
    assert status == {"deliveries_legacy": None, "deliveries_p1": "open",
                      "deliveries_p2": "ahead"}
    add_endpoint(db_url, "https://example.com/h")
    emit(db_url, 3)
    assert {_partition_of(db_url, i) for (i,) in rows(db_url, "SELECT id FROM outbox.deliveries")
            } == {"deliveries_p1"}
    _next_partition(db_url)
    emit(db_url, 1)
    ids = [i for (i,) in rows(db_url, "SELECT id FROM outbox.deliveries ORDER BY id")]
    assert _partition_of(db_url, ids[-1]) == "deliveries_p2"
    assert ids == sorted(ids) and ids[-1] < 2 ** 53  # ids still grow, exact in JSON
    assert _status(db_url)["deliveries_p3"] == "ahead"  # one kept ahead of the open one


def test_a_partition_with_a_pending_row_is_not_dropped_until_it_is_delivered(
        db_url: str) -> None:
    add_endpoint(db_url, "https://example.com/h")
    emit(db_url, 2)
    _next_partition(db_url)
    _finish(db_url, "delivered", "id = (SELECT min(id) FROM outbox.deliveries)")
    assert _status(db_url)["deliveries_p1"] == "pending deliveries"
    result = _drop(db_url)
    assert "deliveries_p1" in _status(db_url) and result.kept >= 1
    assert states(db_url) == {"delivered": 1, "pending": 1}
    # within retention: still kept
    _finish(db_url, "delivered")
    assert _status(db_url, dt.timedelta(hours=1))["deliveries_p1"] == "within retention"
    assert _drop(db_url, dt.timedelta(hours=1)).dropped == 0
    assert _drop(db_url).dropped == 1
    assert "deliveries_p1" not in _status(db_url) and states(db_url) == {}
    assert rows(db_url, "SELECT count(*) FROM outbox.delivery_attempts") == [(0,)]


def test_a_dead_row_blocks_its_partition_for_the_dead_retention(db_url: str) -> None:
    add_endpoint(db_url, "https://example.com/h")
    emit(db_url, 1)
    _finish(db_url, "dead")
    _next_partition(db_url)
    assert _status(db_url)["deliveries_p1"] == "dead deliveries kept for replay"
    assert _status(db_url, NOW, dt.timedelta(days=1))["deliveries_p1"] == (
        "dead deliveries kept for replay")
    assert _drop(db_url, NOW, dt.timedelta(days=1)).dropped == 1  # legacy only
    assert states(db_url) == {"dead": 1}
    # past the dead-letter retention it goes with its partition
    assert _status(db_url, NOW, NOW)["deliveries_p1"] is None
    assert _drop(db_url, NOW, NOW).dropped == 1 and states(db_url) == {}


def test_a_dead_ordered_head_blocks_its_partition_whatever_the_retention(db_url: str) -> None:
    add_endpoint(db_url, "https://example.com/h", ordered=True)
    with psycopg.connect(db_url) as c:
        outbox.emit(c, outbox.Event("t", {}, key="k"))
        c.commit()
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.deliveries SET state = 'dead', finished_at = now()")
    _next_partition(db_url)
    assert _status(db_url, NOW, NOW)["deliveries_p1"] == "a dead head holding its ordered key"
    _drop(db_url, NOW, NOW)
    assert states(db_url) == {"dead": 1}


def test_prune_drops_partitions_and_reports_them(db_url: str) -> None:
    add_endpoint(db_url, "https://example.com/h")
    emit(db_url, 3)
    _finish(db_url, "delivered")
    _next_partition(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        result = prune(c, SCHEMA, NOW)
    assert result.partitions == 2 and result.deliveries == 0  # dropped, not deleted
    assert states(db_url) == {} and result.events == 3  # their events then go by DELETE
    out = invoke(db_url, "partitions", "--older-than", "0s", "--json")
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    assert [p["deliveries"] for p in listed] == ["deliveries_p2", "deliveries_p3"]
    assert [p["droppable"] for p in listed] == [False, False]
    assert listed[0]["blocked_by"] == "open" and listed[0]["bytes"] > 0
    table = invoke(db_url, "partitions")
    assert table.exit_code == 0 and "no: open" in table.output


@pytest.mark.parametrize("args", [["--older-than", "-1d"], ["--older-than", "soon"],
                                  ["--dead-older-than", "x"]])
def test_partitions_refuses_bad_durations(db_url: str, args: list[str]) -> None:
    out = invoke(db_url, "partitions", *args)
    assert out.exit_code != 0 and "Invalid value" in out.output


@pytest.mark.parametrize(("call", "message"), [
    (lambda c: parts.advance(c, SCHEMA, dt.timedelta(seconds=0.5)), "at least 1 second"),
    (lambda c: parts.advance(c, SCHEMA, dt.timedelta(hours=1), 0), "ahead"),
    (lambda c: parts.drop_expired(c, SCHEMA, dt.timedelta(-1)), "negative"),
    (lambda c: parts.drop_expired(c, SCHEMA, NOW, dt.timedelta(-1)), "negative"),
    (lambda c: parts.drop_expired(c, SCHEMA, NOW, None, 0), "lock_timeout_ms"),
])
def test_bad_arguments_change_nothing(db_url: str, call: Any, message: str) -> None:
    before = _status(db_url)
    with psycopg.connect(db_url, autocommit=True) as c, pytest.raises(ValueError, match=message):
        call(c)
    assert _status(db_url) == before


def test_idempotency_keys_deduplicate_across_partitions(db_url: str) -> None:
    add_endpoint(db_url, "https://example.com/h")
    with psycopg.connect(db_url) as c:
        first = outbox.emit(c, outbox.Event("t", {"n": 1}, idempotency_key="order-1"))
        c.commit()
    _next_partition(db_url)
    with psycopg.connect(db_url) as c:
        again = outbox.emit(c, outbox.Event("t", {"n": 1}, idempotency_key="order-1"))
        many = outbox.emit_many(c, [outbox.Event("t", {}, idempotency_key="order-1")])
        c.commit()
    assert again == first and many == [first]
    assert rows(db_url, "SELECT count(*) FROM outbox.deliveries") == [(1,)]


def test_a_dead_delivery_in_an_old_partition_is_listed_replayed_and_delivered(
        db_url: str) -> None:
    with Receiver() as rx:
        endpoint = add_endpoint(db_url, rx.url + "/h")
        (event,) = emit(db_url, 1)
        _finish(db_url, "dead")
        ((dead_id,),) = rows(db_url, "SELECT id FROM outbox.deliveries")
        _next_partition(db_url)
        _next_partition(db_url)
        emit(db_url, 1)
        _finish(db_url, "dead", "state = 'pending'")
        with psycopg.connect(db_url, autocommit=True) as c:
            listed = list_dead(c, schema=SCHEMA, selection=Selection(endpoint_id=endpoint))
            assert dead_id in {d.id for d in listed.rows} and len(listed.rows) == 2
            # the partition holding it outlives retention while the dead row is kept
            parts.drop_expired(c, SCHEMA, NOW, dt.timedelta(days=1))
            replay_lib.replay(c, schema=SCHEMA, selection=Selection(ids=(dead_id,)))
        assert _partition_of(db_url, dead_id) == "deliveries_p1"
        drain(settings(db_url))
        assert rx.wait_for(1, 5)
    assert rows(db_url, "SELECT state FROM outbox.deliveries WHERE id = %s", (dead_id,)) == [
        ("delivered",)]
    assert rows(db_url, "SELECT count(*) FROM outbox.events WHERE id = %s", (event,)) == [(1,)]


def test_per_key_order_holds_across_partition_boundaries(db_url: str) -> None:
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        sent = []
        for batch in range(3):
            with psycopg.connect(db_url) as c:
                for i in range(3):
                    outbox.emit(c, outbox.Event("t", {"n": batch * 3 + i}, key="k"))
                    sent.append(batch * 3 + i)
                c.commit()
            _next_partition(db_url)
        drain(settings(db_url))
        assert rx.wait_for(9, 10)
        got = [json.loads(r.body)["n"] for r in rx.received]
    assert got == sent
    assert len({_partition_of(db_url, i) for (i,) in rows(
        db_url, "SELECT id FROM outbox.deliveries")}) == 3


@pytest.mark.parametrize("width", [-1, 0.5, 9.99])
def test_bad_partition_width_is_refused(width: float) -> None:
    from pydantic import ValidationError

    from outbox.delivery.settings import WorkerSettings

    with pytest.raises(ValidationError, match="partition_seconds"):
        WorkerSettings(database_url="postgresql://x/y", partition_seconds=width)


def test_partition_width_defaults_to_a_third_of_the_retention() -> None:
    from outbox.delivery.retention_task import partition_width
    from outbox.delivery.settings import WorkerSettings

    def width(**kw: Any) -> float:
        return partition_width(WorkerSettings(database_url="postgresql://x/y", **kw))

    assert width() == 7 * 86400 / 3 and width(partition_seconds=10) == 10
    assert width(retention_seconds=60) == 3600 and width(retention_seconds=0) == 86400
