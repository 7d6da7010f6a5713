"""The SQL function outbox.emit against a real PostgreSQL: the Python emit's guarantees."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

import outbox
from outbox import Event
from outbox._db import queries
from outbox._db.connection import render
from outbox.admin import endpoints as ep
from tests.support.pg import SCHEMA, count


def _endpoint(url: str, **kwargs: Any) -> uuid.UUID:
    with psycopg.connect(url, autocommit=True) as c:
        return ep.add(c, "https://example.com/hook", schema=SCHEMA, **kwargs).endpoint.id


def _emit(c: psycopg.Connection[Any], *args: Any, **named: Any) -> uuid.UUID:
    names = ", ".join(f"{k} => %({k})s" for k in named)
    params: dict[str, Any] = {f"a{i}": a for i, a in enumerate(args)} | named
    positional = ", ".join(f"%(a{i})s" for i in range(len(args)))
    row = c.execute(f"SELECT outbox.emit({', '.join(p for p in (positional, names) if p)})"
                    .encode(), params).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def test_commit_writes_the_event_and_its_deliveries(db_url: str,
                                                    conn: psycopg.Connection[Any]) -> None:
    endpoint = _endpoint(db_url)
    event_id = _emit(conn, "order.paid", '{"id": 7}', key="order-7")
    conn.commit()
    assert event_id.version == 7
    with psycopg.connect(db_url) as other:
        assert other.execute(
            "SELECT e.type, e.payload::text, e.key, d.endpoint_id, d.state"
            " FROM outbox.events e JOIN outbox.deliveries d ON d.event_id = e.id"
        ).fetchall() == [("order.paid", '{"id": 7}', "order-7", endpoint, "pending")]


def test_rollback_and_rolled_back_savepoint_leave_nothing(
        db_url: str, conn: psycopg.Connection[Any]) -> None:
    _endpoint(db_url)
    _emit(conn, "order.paid", "{}")
    conn.rollback()
    kept = _emit(conn, "order.kept", "{}")
    conn.execute("SAVEPOINT s")
    _emit(conn, "order.dropped", "{}")
    conn.execute("ROLLBACK TO SAVEPOINT s")
    conn.commit()
    with psycopg.connect(db_url) as other:
        assert other.execute("SELECT id, type FROM outbox.events").fetchall() == [
            (kept, "order.kept")]
    assert count(db_url, "deliveries") == 1


def test_the_set_form_emits_one_event_per_row_in_order(
        db_url: str, conn: psycopg.Connection[Any]) -> None:
    _endpoint(db_url, ordered=True)
    ids = [uuid.UUID(str(i)) for (i,) in conn.execute(
        "SELECT outbox.emit('order.paid', jsonb_build_object('n', g), key => 'k' || g % 3)"
        " FROM generate_series(1, 30) g ORDER BY g").fetchall()]
    conn.execute("SAVEPOINT s")
    conn.execute("SELECT outbox.emit('order.dropped', '{}') FROM generate_series(1, 5)")
    conn.execute("ROLLBACK TO SAVEPOINT s")
    conn.commit()
    assert len(set(ids)) == 30 and ids == sorted(ids)  # UUIDv7: in emit order
    with psycopg.connect(db_url) as other:
        got = other.execute("SELECT (e.payload->>'n')::int, d.key, d.state"
                            " FROM outbox.events e JOIN outbox.deliveries d"
                            " ON d.event_id = e.id ORDER BY d.id").fetchall()
    assert [n for n, _, _ in got] == list(range(1, 31))  # one delivery per row, in order
    assert {(n, k) for n, k, _ in got} == {(g, f"k{g % 3}") for g in range(1, 31)}
    assert {s for _, _, s in got} == {"fresh"}  # ordered per key, as a Python emit's

@pytest.mark.parametrize(("args", "named", "message"), [
    (("bad type", "{}"), {}, "event type 'bad type' is malformed"),
    (("", "{}"), {}, "event type must be a non-empty string"),
    (("x" * 129, "{}"), {}, "event type is 129 characters, over 128"),
    (("x", None), {}, "payload of 'x' is SQL NULL"),
    (("x", "{}"), {"tenant": ""}, "tenant must be a non-empty string or NULL"),
    (("x", "{}"), {"tenant": "a\nb"}, "tenant contains control characters"),
    (("x", "{}"), {"tenant": "t" * 129}, "tenant is 129 characters, over 128"),
    (("x", "{}"), {"key": "k" * 256}, "key is 256 characters, over 255"),
    (("x", "{}"), {"idempotency_key": "a\tb"}, "idempotency_key contains control"),
])
def test_a_refused_event_raises_and_writes_nothing(
        db_url: str, conn: psycopg.Connection[Any], args: tuple[Any, ...],
        named: dict[str, Any], message: str) -> None:
    _endpoint(db_url)
    with pytest.raises(pg_errors.InvalidParameterValue, match=message):
        _emit(conn, *args, **named)
    conn.rollback()
    assert count(db_url, "events") == 0


def test_payload_cap_is_the_functions_setting(db_url: str,
                                              conn: psycopg.Connection[Any]) -> None:
    big = '{"s": "' + "x" * 1024 * 1024 + '"}'
    with pytest.raises(pg_errors.InvalidParameterValue,
                       match=r"payload of 'x' is 1048585 bytes, over the 1048576-byte limit"):
        _emit(conn, "x", big)
    conn.rollback()
    conn.execute("ALTER FUNCTION outbox.emit(text, jsonb, text, text, text)"
                 " SET outbox.max_payload_bytes = '2000000'")
    conn.commit()
    _emit(conn, "x", big)
    # a session cannot lift the cap: the function's own setting wins
    conn.execute("SET outbox.max_payload_bytes = '10'")
    _emit(conn, "x", '{"a": "more than ten bytes"}')
    conn.commit()
    assert count(db_url, "events") == 2


def test_idempotency_is_shared_with_the_python_emit_per_tenant(
        db_url: str, conn: psycopg.Connection[Any]) -> None:
    _endpoint(db_url, tenant="acme")
    _endpoint(db_url)
    first = outbox.emit(conn, Event("x", {}, idempotency_key="k", tenant="acme"))
    assert _emit(conn, "x", "{}", idempotency_key="k", tenant="acme") == first
    other_tenant = _emit(conn, "x", "{}", idempotency_key="k", tenant="globex")
    tenantless = _emit(conn, "x", "{}", idempotency_key="k")
    assert len({first, other_tenant, tenantless}) == 3
    assert outbox.emit(conn, Event("x", {}, idempotency_key="k")) == tenantless
    assert outbox.emit(conn, Event("x", {}, idempotency_key="k", tenant="globex")
                       ) == other_tenant
    conn.commit()
    assert count(db_url, "events") == 3
    assert count(db_url, "deliveries") == 2  # acme's endpoint, the tenant-less one


def test_idempotency_across_transactions(db_url: str) -> None:
    with psycopg.connect(db_url) as a, psycopg.connect(db_url) as b:
        first = _emit(a, "x", "{}", idempotency_key="k")
        a.commit()
        assert _emit(b, "x", "{}", idempotency_key="k") == first
        b.commit()
    assert count(db_url, "events") == 1


def test_wakes_an_idle_worker(db_url: str) -> None:
    _endpoint(db_url)
    with psycopg.connect(db_url, autocommit=True) as worker:
        channel = worker.execute(render(queries.WAKE_CHANNEL_NAME, SCHEMA).encode()).fetchone()
        assert channel is not None
        worker.execute(f'LISTEN "{channel[0]}"'.encode())
        # idle: the worker holds the wake-up lock exclusively
        worker.execute(f"SELECT pg_advisory_lock({render(queries.WAKE_KEY, SCHEMA)})".encode())
        with psycopg.connect(db_url) as c:
            _emit(c, "x", "{}")
            c.commit()
        notes = list(worker.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in notes] == [channel[0]]


def test_ids_are_uuidv7_in_time_order(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute("SELECT outbox.uuid7() FROM generate_series(1, 200)").fetchall()
    ids = [uuid.UUID(str(r[0])) for r in rows]
    assert {i.version for i in ids} == {7} and {i.variant for i in ids} == {uuid.RFC_4122}
    stamps = [i.int >> 80 for i in ids]
    assert stamps == sorted(stamps)
    python_id = outbox.emit(conn, Event("x", {}))
    assert abs((python_id.int >> 80) - stamps[-1]) < 60_000  # same clock, milliseconds


def test_concurrent_idempotent_emits_return_the_committed_id(db_url: str) -> None:
    """B emits A's key while A's insert is uncommitted: B waits for A, then returns A's id
    (a new statement snapshot sees A's commit) and writes nothing."""
    result: list[uuid.UUID] = []
    with psycopg.connect(db_url) as a, psycopg.connect(db_url) as b:
        first = _emit(a, "x", "{}", idempotency_key="k", tenant="acme")
        pid = b.info.backend_pid

        def other() -> None:
            result.append(_emit(b, "x", "{}", idempotency_key="k", tenant="acme"))
            b.commit()

        thread = threading.Thread(target=other)
        thread.start()
        with psycopg.connect(db_url, autocommit=True) as watch:
            for _ in range(200):  # until B waits on A's transaction
                row = watch.execute("SELECT wait_event_type FROM pg_stat_activity"
                                    " WHERE pid = %s", (pid,)).fetchone()
                if row and row[0] == "Lock":
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("B never waited for A")
        a.commit()
        thread.join(30)
    assert result == [first]
    assert count(db_url, "events") == 1


def test_custom_schema_routes_and_wakes_in_its_own_schema(blank_db_url: str) -> None:
    from outbox.admin.migrations import migrate

    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, "webhooks")
        ep.add(c, "https://example.com/hook", schema="webhooks")
        channel = c.execute(render(queries.WAKE_CHANNEL_NAME, "webhooks").encode()).fetchone()
        assert channel is not None
        c.execute(f'LISTEN "{channel[0]}"'.encode())
        c.execute(f"SELECT pg_advisory_lock({render(queries.WAKE_KEY, 'webhooks')})".encode())
        with psycopg.connect(blank_db_url) as w:
            w.execute("SELECT webhooks.emit('x', '{}')")
            w.commit()
        assert [n.channel for n in c.notifies(timeout=5, stop_after=1)] == [channel[0]]
        assert c.execute("SELECT count(*) FROM webhooks.deliveries").fetchone() == (1,)
