"""emit's guarantees against a real PostgreSQL: each one a test."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

import outbox
from outbox import Event, InvalidEvent, NotInTransaction, SchemaMissing, Settings
from outbox.admin import endpoints as ep
from tests.support.pg import SCHEMA, count


def _endpoint(url: str, types: list[str] | None = None, enabled: bool = True) -> uuid.UUID:
    with psycopg.connect(url, autocommit=True) as c:
        e = ep.add(c, "https://example.com/hook", schema=SCHEMA, event_types=types).endpoint
        if not enabled:
            ep.set_enabled(c, e.id, False, schema=SCHEMA)
    return e.id


def test_commit_makes_it_deliverable(db_url: str, conn: psycopg.Connection[Any]) -> None:
    endpoint = _endpoint(db_url)
    conn.execute("CREATE TABLE invoices (id int)")
    conn.execute("INSERT INTO invoices VALUES (1)")
    event_id = outbox.emit(conn, Event("invoice.paid", {"id": 1}))
    conn.commit()
    with psycopg.connect(db_url) as other:
        row = other.execute(
            "SELECT event_id, endpoint_id, state, attempts, visible_at <= now()"
            " FROM outbox.deliveries"
        ).fetchall()
    assert row == [(event_id, endpoint, "pending", 0, True)]


def test_rollback_leaves_no_trace(db_url: str, conn: psycopg.Connection[Any]) -> None:
    _endpoint(db_url)
    outbox.emit(conn, Event("invoice.paid", {"id": 1}))
    outbox.emit_many(conn, [Event("invoice.paid", {"id": i}) for i in range(3)])
    conn.rollback()
    assert count(db_url, "events") == 0
    assert count(db_url, "deliveries") == 0


def test_autocommit_outside_transaction_is_refused(db_url: str) -> None:
    _endpoint(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(NotInTransaction, match="autocommit"):
            outbox.emit(c, Event("x", {}))
        with pytest.raises(NotInTransaction):
            outbox.emit_many(c, [Event("x", {})])
        with c.transaction():  # the right way on an autocommit connection
            outbox.emit(c, Event("x", {}))
    assert count(db_url, "events") == 1


def test_failed_transaction_is_refused(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero):
        conn.execute("SELECT 1/0")
    with pytest.raises(NotInTransaction, match="roll back"):
        outbox.emit(conn, Event("x", {}))


@pytest.mark.parametrize(
    "event",
    [
        Event("x", {"a": {1, 2}}),
        Event("x", {"a": float("nan")}),
        Event("x", "y" * 2000),
        Event("", {}),
        Event("bad type", {}),
    ],
)
def test_invalid_event_sends_no_sql(db_url: str, event: Event) -> None:
    settings = Settings(database_url=db_url, max_payload_bytes=1024)
    with psycopg.connect(db_url) as c:
        assert c.info.transaction_status == TransactionStatus.IDLE
        with pytest.raises(InvalidEvent):
            outbox.emit(c, event, settings=settings)
        with pytest.raises(InvalidEvent):
            outbox.emit_many(c, [Event("ok", {}), event], settings=settings)
        # no statement reached the server: psycopg would have opened a transaction
        assert c.info.transaction_status == TransactionStatus.IDLE
    assert count(db_url, "events") == 0


def test_idempotency_key_returns_first_id(db_url: str, conn: psycopg.Connection[Any]) -> None:
    _endpoint(db_url)
    first = outbox.emit(conn, Event("x", {"n": 1}, idempotency_key="order-1"))
    conn.commit()
    again = outbox.emit(conn, Event("x", {"n": 2}, idempotency_key="order-1"))
    same_tx = outbox.emit(conn, Event("x", {"n": 3}, idempotency_key="order-1"))
    batch = outbox.emit_many(
        conn,
        [
            Event("x", {}, idempotency_key="order-1"),
            Event("x", {}, idempotency_key="order-2"),
            Event("x", {}, idempotency_key="order-2"),
            Event("x", {}),
        ],
    )
    conn.commit()
    assert again == same_tx == first == batch[0]
    assert batch[1] == batch[2] != batch[3]
    assert count(db_url, "events") == 3
    assert count(db_url, "deliveries") == 3


def test_idempotency_key_race_between_transactions(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """B blocks on A's uncommitted key, then returns A's id once A commits."""
    first = outbox.emit(conn, Event("x", {}, idempotency_key="race"))
    result: list[uuid.UUID] = []

    def other() -> None:
        with psycopg.connect(db_url) as c2:
            result.append(outbox.emit(c2, Event("x", {}, idempotency_key="race")))
            c2.commit()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive(), "B should wait for A's transaction"
    conn.commit()
    thread.join(10)
    assert result == [first]
    assert count(db_url, "events") == 1


def test_fan_out_follows_subscriptions(db_url: str, conn: psycopg.Connection[Any]) -> None:
    every = _endpoint(db_url)
    paid = _endpoint(db_url, ["invoice.paid", "invoice.voided"])
    _endpoint(db_url, ["user.created"])
    _endpoint(db_url, enabled=False)
    e1 = outbox.emit(conn, Event("invoice.paid", {}))
    e2 = outbox.emit(conn, Event("order.shipped", {}))
    conn.commit()
    rows = conn.execute("SELECT event_id, endpoint_id FROM outbox.deliveries").fetchall()
    assert sorted(rows) == sorted([(e1, every), (e1, paid), (e2, every)])


def test_no_subscriber_stores_event_without_deliveries(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    _endpoint(db_url, ["user.created"])
    event_id = outbox.emit(conn, Event("invoice.paid", {"amount": 5}))
    conn.commit()
    row = conn.execute("SELECT id, type, payload::text FROM outbox.events").fetchone()
    assert row == (event_id, "invoice.paid", '{"amount":5}')
    assert count(db_url, "deliveries") == 0


def test_emit_many_ids_in_order(db_url: str, conn: psycopg.Connection[Any]) -> None:
    _endpoint(db_url)
    events = [Event("n", {"i": i}, key=f"k{i % 3}") for i in range(1000)]
    ids = outbox.emit_many(conn, events)
    conn.commit()
    stored = dict(conn.execute("SELECT id, (payload->>'i')::int FROM outbox.events").fetchall())
    assert [stored[i] for i in ids] == list(range(1000))
    assert count(db_url, "deliveries") == 1000
    assert outbox.emit_many(conn, []) == []


def test_payload_bytes_are_kept_exactly(conn: psycopg.Connection[Any]) -> None:
    payload = {"z": 1, "a": "ünïcødé \u2028", "nested": {"b": [1, 2], "a": None}}
    outbox.emit(conn, Event("x", payload))
    row = conn.execute("SELECT payload::text FROM outbox.events").fetchone()
    assert row == ('{"z":1,"a":"ünïcødé \u2028","nested":{"b":[1,2],"a":null}}',)


def test_missing_schema_is_a_clear_error(blank_db_url: str) -> None:
    with psycopg.connect(blank_db_url) as c, pytest.raises(SchemaMissing, match="outbox migrate"):
        outbox.emit(c, Event("x", {}))


def test_async_commit_and_rollback(db_url: str) -> None:
    _endpoint(db_url)

    async def scenario() -> list[uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(db_url) as ac:
            await outbox.emit_async(ac, Event("x", {"n": 0}))
            await ac.rollback()
            kept = [await outbox.emit_async(ac, Event("x", {"n": 1}, idempotency_key="a"))]
            kept += await outbox.emit_many_async(ac, [Event("x", {"n": 2}), Event("y", {})])
            again = await outbox.emit_async(ac, Event("x", {}, idempotency_key="a"))
            assert again == kept[0]
            await ac.commit()
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as ac:
            with pytest.raises(NotInTransaction):
                await outbox.emit_async(ac, Event("x", {}))
        return kept

    kept = asyncio.run(scenario())
    assert len(kept) == 3
    assert count(db_url, "events") == 3
    assert count(db_url, "deliveries") == 3


def test_deadlock_is_not_reported_as_unreachable(db_url: str) -> None:
    from outbox._db.connection import translated
    from outbox.errors import DatabaseError, DatabaseUnavailable

    with pytest.raises(DatabaseError, match="DeadlockDetected") as info, translated(db_url):
        raise psycopg.errors.DeadlockDetected("deadlock detected")
    assert not isinstance(info.value, DatabaseUnavailable)
    with pytest.raises(DatabaseUnavailable, match="cannot reach PostgreSQL"), translated(db_url):
        raise psycopg.OperationalError("connection refused")


def test_emit_many_fan_out_follows_subscriptions(db_url: str) -> None:
    """The COPY path (no idempotency keys) fans out exactly like the single emit."""
    every = _endpoint(db_url)
    paid = _endpoint(db_url, ["invoice.paid"])
    _endpoint(db_url, enabled=False)
    events = [Event("invoice.paid", {"n": 1}), Event("order.shipped", {"n": 2})]

    async def via_async() -> list[uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(db_url) as ac:
            ids = await outbox.emit_many_async(ac, events)
            await ac.commit()
            return ids

    with psycopg.connect(db_url) as c:
        sync_ids = outbox.emit_many(c, events)
        c.commit()
    async_ids = asyncio.run(via_async())
    with psycopg.connect(db_url) as c:
        got = c.execute("SELECT event_id, endpoint_id FROM outbox.deliveries").fetchall()
        payloads = c.execute("SELECT payload::text FROM outbox.events"  # the app's own,
                             " WHERE NOT starts_with(type, 'outbox.')"  # not the disable's
                             " ORDER BY id").fetchall()
    expected = []
    for ids in (sync_ids, async_ids):
        expected += [(ids[0], every), (ids[0], paid), (ids[1], every)]
    assert sorted(got) == sorted(expected)
    assert payloads == [('{"n":1}',), ('{"n":2}',)] * 2


def test_the_callers_row_factory_changes_nothing(db_url: str) -> None:
    """outbox reads with its own row factories: a dict_row connection emits the same."""
    paid = _endpoint(db_url, ["invoice.paid"])
    keyed = [Event("invoice.paid", {"n": 1}, idempotency_key="k1"), Event("invoice.paid", {})]
    plain = [Event("invoice.paid", {"n": 2}), Event("order.shipped", {"n": 3})]

    async def via_async() -> list[uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(db_url, row_factory=dict_row) as ac:
            one = await outbox.emit_async(ac, Event("invoice.paid", {}, idempotency_key="k2"))
            again = await outbox.emit_async(ac, Event("invoice.paid", {}, idempotency_key="k2"))
            assert again == one
            ids = await outbox.emit_many_async(ac, keyed) + await outbox.emit_many_async(ac, plain)
            await ac.commit()
            return [one, *ids]

    with psycopg.connect(db_url, row_factory=dict_row) as dc:
        one = outbox.emit(dc, Event("invoice.paid", {}, idempotency_key="k3"))
        assert outbox.emit(dc, Event("invoice.paid", {}, idempotency_key="k3")) == one
        sync_ids = [one, *outbox.emit_many(dc, keyed), *outbox.emit_many(dc, plain)]
        dc.commit()
    async_ids = asyncio.run(via_async())
    assert async_ids[1] == sync_ids[1]  # key k1: the event the sync batch inserted
    with psycopg.connect(db_url) as c:
        got = c.execute("SELECT event_id, endpoint_id FROM outbox.deliveries").fetchall()
    expected = {(i, paid) for i in sync_ids[:4] + async_ids[:4]}  # order.shipped: no one
    assert sorted(got) == sorted(expected)


@pytest.mark.parametrize("schema", ["x'||pg_sleep(1)||'", 'a"b', "Outbox", "a b"])
def test_bad_schema_argument_is_refused_before_any_sql(
        db_url: str, conn: psycopg.Connection[Any], schema: str) -> None:
    """A schema reaches SQL text (some statements use it inside string literals): only a
    lowercase identifier is accepted, on every path, with nothing written."""
    _endpoint(db_url)
    with pytest.raises(outbox.ConfigurationError, match="lowercase SQL identifier"):
        outbox.emit(conn, Event("x", {}), schema=schema)
    with pytest.raises(outbox.ConfigurationError, match="lowercase SQL identifier"):
        outbox.emit_many(conn, [Event("x", {}), Event("y", {})], schema=schema)
    with pytest.raises(outbox.ConfigurationError, match="lowercase SQL identifier"):
        ep.list_all(conn, schema=schema)
    conn.commit()
    assert count(db_url, "events") == 0
