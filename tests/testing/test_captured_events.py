"""outbox.testing.captured_events: what a block emitted, none if it rolled back, and the
caller's transaction left as it was."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import outbox
from outbox.errors import ConfigurationError, OutboxError
from outbox.testing import captured_events

Conn = psycopg.Connection[Any]


def _emit(conn: Conn, *types: str, **fields: Any) -> None:
    for kind in types:
        outbox.emit(conn, outbox.Event(kind, {"kind": kind}, **fields))


def test_a_committed_block_captures_its_events_in_order(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url) as conn:
        with captured_events(conn) as events, conn.transaction():
            _emit(conn, "a.one", "a.two", "a.three")
        assert conn.info.transaction_status == TransactionStatus.IDLE
    assert events.types == ["a.one", "a.two", "a.three"]
    assert events[0].payload == {"kind": "a.one"} and events[0].deliveries == 0


def test_a_rolled_back_block_captures_none(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url) as conn, captured_events(conn) as events, \
            conn.transaction():
        _emit(conn, "b.gone")
        raise psycopg.Rollback
    assert events == []


def test_a_block_raising_inside_its_transaction_captures_none(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url) as conn, pytest.raises(ZeroDivisionError), \
            captured_events(conn) as events, conn.transaction():
        _emit(conn, "c.gone")
        _ = 1 / 0
    assert events == []


def test_events_before_the_block_are_not_captured(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url, autocommit=True) as conn:
        with conn.transaction():
            _emit(conn, "d.before")
        with captured_events(conn) as events, conn.transaction():
            _emit(conn, "d.during", key="k1", tenant="acme", idempotency_key="once")
    [event] = events
    assert (event.type, event.key, event.tenant, event.idempotency_key) == (
        "d.during", "k1", "acme", "once")


def test_an_open_transaction_is_seen_and_left_open(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url) as conn:
        conn.execute("SELECT 1")  # the caller's transaction is open before the block
        with captured_events(conn) as events:
            _emit(conn, "e.uncommitted")
        assert events.types == ["e.uncommitted"]
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        conn.rollback()
    with captured_events(outbox_database_url) as after:
        pass
    assert after == []


def test_an_idle_connection_stays_idle(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url) as conn:
        with captured_events(conn) as events:
            assert conn.info.transaction_status == TransactionStatus.IDLE
        assert conn.info.transaction_status == TransactionStatus.IDLE
    assert events == []


def test_a_url_sees_committed_events_of_other_connections(outbox_database_url: str) -> None:
    with captured_events(outbox_database_url) as events:
        with psycopg.connect(outbox_database_url) as other:
            _emit(other, "f.committed")
            other.commit()
        with psycopg.connect(outbox_database_url) as other:
            _emit(other, "f.never")
            other.rollback()
    assert events.types == ["f.committed"]


def test_fan_out_is_counted(outbox_database_url: str, outbox_endpoint: object) -> None:
    with psycopg.connect(outbox_database_url) as conn, captured_events(conn) as events, \
            conn.transaction():
        _emit(conn, "g.routed")
        _emit(conn, "g.tenant", tenant="acme")  # the fixture's endpoint takes every tenant's
    assert [(e.type, e.deliveries) for e in events] == [("g.routed", 1), ("g.tenant", 1)]


def test_a_failed_transaction_left_open_is_an_error(outbox_database_url: str) -> None:
    with psycopg.connect(outbox_database_url) as conn:
        with pytest.raises(OutboxError, match="roll it back"), captured_events(conn), \
                pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        assert conn.info.transaction_status == TransactionStatus.INERROR


def test_a_bad_schema_is_refused_before_the_block(outbox_database_url: str) -> None:
    ran = []
    with pytest.raises(ConfigurationError, match="lowercase SQL identifier"), \
            captured_events(outbox_database_url, schema="Bad-Schema"):
        ran.append(True)
    assert ran == []


def test_another_handle_is_refused_before_the_block(outbox_database_url: str) -> None:
    async def refused() -> None:
        async with await psycopg.AsyncConnection.connect(outbox_database_url) as aconn:
            with pytest.raises(TypeError, match="pass the URL"), \
                    captured_events(aconn):  # type: ignore[arg-type]
                ran.append(True)

    ran: list[bool] = []
    asyncio.run(refused())
    assert ran == []
