"""emit's guarantees on every stack it takes, against a real PostgreSQL.

One matrix over the handles of tests/support/stacks.py: psycopg 3 (sync, async), psycopg2
(connection, cursor), asyncpg (connection, pool connection), SQLAlchemy (Session on psycopg
and psycopg2, Connection, AsyncSession on asyncpg and psycopg, AsyncConnection). Django has
its own module (test_emit_stacks_django.py): it runs in a Django project of its own.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import outbox
from outbox import (
    ConfigurationError,
    Event,
    InvalidEvent,
    NotInTransaction,
    OutboxError,
    SchemaMissing,
    Settings,
)
from outbox._db import queries
from outbox._db.connection import render
from outbox._emit.drivers.base import bind, to_dollar
from tests.support.pg import SCHEMA, count
from tests.support.stacks import ORDERS, STACKS, Psycopg2, Stack, sa_url
from tests.support.workers import add_endpoint, rows


@pytest.fixture(params=STACKS, ids=[s.name for s in STACKS])
def stack_type(request: pytest.FixtureRequest) -> type[Stack]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def stack(db_url: str, stack_type: type[Stack]) -> Iterator[Stack]:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(ORDERS)
    with stack_type(db_url) as s:
        yield s


def orders(db_url: str) -> int:
    return int(rows(db_url, "SELECT count(*) FROM public.orders")[0][0])


def test_commit_writes_event_and_deliveries(db_url: str, stack: Stack) -> None:
    every = add_endpoint(db_url, "https://example.com/all")
    paid = add_endpoint(db_url, "https://example.com/paid", event_types=["invoice.paid"])
    stack.write(1)
    one = stack.emit(Event("invoice.paid", {"id": 1, "note": "50% ünï"}, key="k1"))
    many = stack.emit_many([Event("invoice.paid", {"i": i}, tenant=None) for i in range(3)]
                           + [Event("order.shipped", {"i": 3})])
    stack.commit()
    assert all(type(i) is uuid.UUID for i in [one, *many])
    assert orders(db_url) == 1
    stored = dict(rows(db_url, "SELECT id, payload::text FROM outbox.events"))
    assert stored[one] == '{"id":1,"note":"50% ünï"}'  # the bytes, not a re-encoded string
    assert [stored[i] for i in many] == ['{"i":0}', '{"i":1}', '{"i":2}', '{"i":3}']
    got = rows(db_url, "SELECT event_id, endpoint_id FROM outbox.deliveries")
    expected = [(i, every) for i in [one, *many]] + [(i, paid) for i in [one, *many[:3]]]
    assert sorted(got) == sorted(expected)


def test_rollback_leaves_no_trace(db_url: str, stack: Stack) -> None:
    """The emit comes first: on SQLAlchemy's asyncpg adapter, whose transaction begins
    lazily, a statement sent to the raw connection here would have committed on its own."""
    add_endpoint(db_url, "https://example.com/all")
    stack.emit(Event("invoice.paid", {"id": 1}))
    stack.write(1)
    stack.emit_many([Event("invoice.paid", {"i": i}) for i in range(3)])
    stack.emit(Event("invoice.paid", {}, idempotency_key="k"))
    stack.rollback()
    assert (count(db_url, "events"), count(db_url, "deliveries"), orders(db_url)) == (0, 0, 0)
    stack.emit(Event("invoice.paid", {"id": 2}))  # the handle goes on working
    stack.commit()
    assert count(db_url, "events") == 1


def test_outside_a_transaction_is_refused(db_url: str, stack_type: type[Stack]) -> None:
    add_endpoint(db_url, "https://example.com/all")
    with stack_type(db_url, autocommit=True) as s:
        with pytest.raises(NotInTransaction):
            s.emit(Event("x", {}))
        with pytest.raises(NotInTransaction):
            s.emit_many([Event("x", {}), Event("y", {})])
        with pytest.raises(NotInTransaction):
            s.emit_many([Event("x", {}, idempotency_key="k")])
    assert count(db_url, "events") == 0


def test_sqlalchemy_session_without_autobegin_needs_begin(db_url: str) -> None:
    engine = create_engine(sa_url(db_url, "psycopg"))
    try:
        with Session(engine, autobegin=False) as session:
            with pytest.raises(NotInTransaction, match="autobegin=False"):
                outbox.emit(session, Event("x", {}))
            with session.begin():
                outbox.emit(session, Event("x", {}))
    finally:
        engine.dispose()
    assert count(db_url, "events") == 1


def test_failed_transaction_is_refused(db_url: str, stack: Stack) -> None:
    stack.fail()
    with pytest.raises(NotInTransaction, match="roll back"):
        stack.emit(Event("x", {}))
    stack.rollback()
    stack.emit(Event("x", {}))
    stack.commit()
    assert count(db_url, "events") == 1


@pytest.mark.parametrize("event", [
    Event("x", {"a": {1, 2}}), Event("x", {"a": float("nan")}), Event("x", "y" * 2000),
    Event("bad type", {}), Event("x", {}, idempotency_key=""),
])
def test_invalid_event_is_refused_before_any_sql(
        db_url: str, stack: Stack, event: Event) -> None:
    """The schema does not exist: any SQL would raise SchemaMissing, not InvalidEvent."""
    nowhere = Settings(database_url=db_url, schema_name="nosuch", max_payload_bytes=1024)
    with pytest.raises(InvalidEvent):
        stack.emit(event, settings=nowhere)
    with pytest.raises(InvalidEvent):
        stack.emit_many([Event("ok", {}), event], settings=nowhere)
    stack.emit(Event("ok", {}))  # the transaction is intact
    stack.commit()
    assert count(db_url, "events") == 1


class Cents:
    def __init__(self, n: int) -> None:
        self.n = n


def test_json_default_reaches_every_stack(db_url: str, stack: Stack) -> None:
    def encode(obj: object) -> object:
        if isinstance(obj, Cents):
            return f"{obj.n / 100:.2f}"
        raise TypeError(type(obj).__name__)

    one = stack.emit(Event("x", {"total": Cents(999)}), json_default=encode)
    many = stack.emit_many([Event("x", [Cents(1)])], json_default=encode)
    with pytest.raises(InvalidEvent):
        stack.emit(Event("x", {"total": Cents(1)}))
    stack.commit()
    stored = dict(rows(db_url, "SELECT id, payload::text FROM outbox.events"))
    assert stored == {one: '{"total":"9.99"}', many[0]: '["0.01"]'}


def test_missing_schema_is_schema_missing(stack: Stack) -> None:
    with pytest.raises(SchemaMissing, match="outbox migrate"):
        stack.emit(Event("x", {}), schema="nosuch")


def test_idempotency_keys_dedupe(db_url: str, stack: Stack) -> None:
    add_endpoint(db_url, "https://example.com/all")
    first = stack.emit(Event("x", {"n": 1}, idempotency_key="order-1"))
    assert stack.emit(Event("x", {"n": 2}, idempotency_key="order-1")) == first
    stack.commit()
    again = stack.emit(Event("x", {"n": 3}, idempotency_key="order-1"))
    batch = stack.emit_many([
        Event("x", {}, idempotency_key="order-1"), Event("x", {}, idempotency_key="order-2"),
        Event("x", {}, idempotency_key="order-2"), Event("x", {}),
        Event("x", {}, idempotency_key="order-1", tenant="acme"),
    ])
    stack.commit()
    assert again == batch[0] == first
    assert batch[1] == batch[2] != batch[3]
    assert len({first, batch[1], batch[3], batch[4]}) == 4  # per tenant
    assert (count(db_url, "events"), count(db_url, "deliveries")) == (4, 3)


def test_commit_wakes_an_idle_worker(db_url: str, stack: Stack) -> None:
    """OUTBOX_WAKEUP=notify: the emit statements' NOTIFY reaches a listening idle worker
    (one holding the wake-up lock) at commit, on every stack, and not before; a commit
    that wrote no delivery (no endpoint takes the type) sends none."""
    add_endpoint(db_url, "https://example.com/xy", event_types=["x", "y"])
    with psycopg.connect(db_url, autocommit=True) as idle:
        idle.execute(render(f"SELECT pg_advisory_lock({queries.WAKE_KEY})", SCHEMA))
        channel = idle.execute(render(queries.WAKE_CHANNEL_NAME, SCHEMA)).fetchone()
        assert channel is not None
        idle.execute(f'LISTEN "{channel[0]}"'.encode())
        stack.emit(Event("x", {}))
        assert list(idle.notifies(timeout=0.2)) == []
        stack.commit()
        assert len(list(idle.notifies(timeout=5, stop_after=1))) == 1
        for batch in ([Event("x", {}), Event("y", {})],  # psycopg 3: the COPY path
                      [Event("x", {}, idempotency_key="k")]):  # every stack: EMIT_MANY_WAKE
            stack.emit_many(batch)
            stack.commit()
            assert len(list(idle.notifies(timeout=5, stop_after=1))) == 1
        for unrouted in ([Event("z", {}), Event("z", {"n": 1})],
                         [Event("z", {}, idempotency_key="z")]):
            stack.emit_many(unrouted)
            stack.emit(Event("z", {"n": 2}))
            stack.commit()
            assert list(idle.notifies(timeout=0.3)) == []
        assert count(db_url, "events") == 4 + 5 and count(db_url, "deliveries") == 4


PSYCOPG2 = [s for s in STACKS if "psycopg2" in s.name]


@pytest.mark.parametrize("stack_type", PSYCOPG2, ids=[s.name for s in PSYCOPG2])
@pytest.mark.parametrize("threshold", [0, 2, None])
def test_psycopg2_prepares_after_the_threshold(
        db_url: str, threshold: int | None, stack_type: type[Stack]) -> None:
    """psycopg2 plans every statement it sends; the single-event emits get prepared after
    OUTBOX_PREPARE_THRESHOLD runs on a connection (None: never), survive a rollback, are
    prepared again when the server session lost them, and keep every guarantee."""
    endpoint = add_endpoint(db_url, "https://example.com/all")
    s = Settings(database_url=db_url, schema_name=SCHEMA, prepare_threshold=threshold)
    query = "SELECT count(*) AS n FROM pg_prepared_statements WHERE name LIKE 'outbox_%'"
    with stack_type(db_url) as stack:
        stack.emit(Event("x", {"n": 0}), settings=s)
        stack.rollback()
        ids = [stack.emit(Event("x", {"n": i}), settings=s) for i in range(1, 5)]
        keyed = [stack.emit(Event("x", {"k": i}, idempotency_key="k"), settings=s)
                 for i in range(4)]
        stack.commit()
        stack.call(lambda: stack.execute("DEALLOCATE ALL"))  # as DISCARD ALL, or a pooler
        ids.append(stack.emit(Event("x", {"n": 5}), settings=s))  # prepared once more
        stack.commit()
        if isinstance(stack.handle, Session):
            prepared = stack.handle.execute(text(query)).scalar()
        else:
            assert isinstance(stack, Psycopg2)
            with stack.connection().cursor() as cur:
                cur.execute(query)
                prepared = cur.fetchone()["n"]
    assert prepared == (0 if threshold is None else 1)
    assert len(set(keyed)) == 1
    stored = dict(rows(db_url, "SELECT id, payload::text FROM outbox.events"))
    assert [stored[i] for i in ids] == [f'{{"n":{i}}}' for i in range(1, 6)]
    assert stored[keyed[0]] == '{"k":0}'
    assert sorted(rows(db_url, "SELECT event_id, endpoint_id FROM outbox.deliveries")) == sorted(
        (i, endpoint) for i in [*ids, keyed[0]])


def test_statements_are_translated_once_from_psycopgs() -> None:
    """asyncpg's statements come from psycopg's: $n in first-use order (a name used twice
    is one parameter), %% unescaped, json bound as text; mixed placeholders are refused."""
    text, order = to_dollar(render(queries.EMIT_ONE_IDEMPOTENT_WAKE, SCHEMA))
    assert order == ("ikey", "id", "type", "payload", "key", "traceparent", "tenant")
    assert "%(" not in text and "'%.*'" in text and "$4::text::json" in text
    assert text.count("$1") == 3 and text.count("$2") == 2
    text, count_ = to_dollar(render(queries.EMIT_ONE, SCHEMA))
    assert count_ == 6 and "$6" in text and "%s" not in text
    assert bind("dollar", "SELECT %(b)s, %(a)s, %(b)s", {"a": 1, "b": uuid.UUID(int=0)}) == (
        "SELECT $1, $2, $1", [str(uuid.UUID(int=0)), 1])
    with pytest.raises(ValueError, match="mixes"):
        to_dollar("SELECT %s, %(a)s")


def test_unsupported_handles_are_a_type_error(db_url: str) -> None:
    with pytest.raises(TypeError, match=r"psycopg2 connection or cursor.*SQLAlchemy Session"):
        outbox.emit(object(), Event("x", {}))
    with pytest.raises(TypeError, match="asyncpg Connection"):
        outbox.emit_many(db_url, [Event("x", {})])
    with STACKS[4](db_url) as apg, pytest.raises(TypeError, match=r"use outbox\.emit_async"):
        outbox.emit(apg.handle, Event("x", {}))
    with STACKS[6](db_url) as session:
        async def wrong() -> Any:
            return await outbox.emit_async(session.handle, Event("x", {}))

        with pytest.raises(TypeError, match=r"use outbox\.emit / emit_many"):
            asyncio.run(wrong())
    assert count(db_url, "events") == 0


def test_importing_and_emitting_imports_no_other_driver(db_url: str) -> None:
    """A psycopg 3 application emitting (and refusing a wrong handle) loads no driver or ORM
    it did not import itself."""
    script = f"""
import sys, psycopg, outbox
with psycopg.connect({db_url!r}) as c:
    outbox.emit(c, outbox.Event("x", {{}}))
try:
    outbox.emit(object(), outbox.Event("x", {{}}))
except TypeError:
    pass
loaded = sorted(m for m in ("psycopg2", "asyncpg", "sqlalchemy", "django") if m in sys.modules)
print(loaded)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_released_asyncpg_pool_connection_is_an_outbox_error(db_url: str) -> None:
    """A pool connection used after ``release`` (asyncpg raises InterfaceError on any use)
    is an OutboxError, as every other driver failure, and writes nothing."""
    async def scenario() -> None:
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=1)
        try:
            conn = await pool.acquire()
            await pool.release(conn)
            for attempt in (outbox.emit_async(conn, Event("x", {})),
                            outbox.emit_many_async(conn, [Event("x", {})])):
                with pytest.raises(OutboxError, match="released"):
                    await attempt
        finally:
            await pool.close()

    asyncio.run(scenario())
    assert count(db_url, "events") == 0


def test_sqlalchemy_session_without_a_default_bind_is_a_clear_error(db_url: str) -> None:
    """Several binds, no default: which database holds the outbox is the app's to say, by
    passing that bind's connection in the session's transaction (which then commits it)."""
    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(primary_key=True)

    shop, other = (create_engine(sa_url(db_url, "psycopg")) for _ in range(2))
    try:
        with Session(binds={Order: shop, Base: other}) as session:
            with pytest.raises(ConfigurationError, match=r"bind_arguments=\{'bind': engine\}"):
                outbox.emit(session, Event("x", {}))
            with pytest.raises(ConfigurationError, match="several binds"):
                outbox.emit_many(session, [Event("x", {}), Event("y", {})])
            one = outbox.emit(session.connection(bind_arguments={"bind": shop}), Event("x", {}))
            session.commit()
    finally:
        shop.dispose()
        other.dispose()
    assert rows(db_url, "SELECT id FROM outbox.events") == [(one,)]


def test_sqlalchemy_async_connection_never_started_is_refused(db_url: str) -> None:
    """``engine.connect()`` not awaited: outbox does not start it (the event would sit in
    a transaction nobody commits)."""
    async def scenario() -> None:
        engine = create_async_engine(sa_url(db_url, "asyncpg"))
        try:
            idle = engine.connect()
            with pytest.raises(NotInTransaction, match="never started"):
                await outbox.emit_async(idle, Event("x", {}))
            with pytest.raises(NotInTransaction, match="never started"):
                await outbox.emit_many_async(idle, [Event("x", {}), Event("y", {})])
            assert idle.sync_connection is None
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert count(db_url, "events") == 0


def event_ids(db_url: str) -> list[uuid.UUID]:
    return sorted(r[0] for r in rows(db_url, "SELECT id FROM outbox.events"))


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_sqlalchemy_rolled_back_savepoint_takes_its_events(db_url: str, driver: str) -> None:
    engine = create_engine(sa_url(db_url, driver))
    try:
        with Session(engine) as session:
            kept = [outbox.emit(session, Event("x", {"at": "outer"}))]
            nested = session.begin_nested()
            outbox.emit(session, Event("x", {"at": "inner"}))
            outbox.emit_many(session, [Event("x", {}), Event("y", {})])
            nested.rollback()
            kept.append(outbox.emit(session, Event("x", {"at": "after"})))
            session.commit()
    finally:
        engine.dispose()
    assert event_ids(db_url) == sorted(kept)


def test_sqlalchemy_async_rolled_back_savepoint_takes_its_events(db_url: str) -> None:
    async def scenario() -> list[uuid.UUID]:
        engine = create_async_engine(sa_url(db_url, "asyncpg"))
        try:
            async with AsyncSession(engine) as session:
                kept = [await outbox.emit_async(session, Event("x", {"at": "outer"}))]
                nested = await session.begin_nested()
                await outbox.emit_async(session, Event("x", {"at": "inner"}))
                await outbox.emit_many_async(session, [Event("x", {}), Event("y", {})])
                await nested.rollback()
                kept.append(await outbox.emit_async(session, Event("x", {"at": "after"})))
                await session.commit()
            return kept
        finally:
            await engine.dispose()

    kept = asyncio.run(scenario())
    assert event_ids(db_url) == sorted(kept)


def test_asyncpg_rolled_back_nested_transaction_takes_its_events(db_url: str) -> None:
    async def scenario() -> list[uuid.UUID]:
        conn = await asyncpg.connect(db_url)
        try:
            async with conn.transaction():
                kept = [await outbox.emit_async(conn, Event("x", {"at": "outer"}))]
                inner = conn.transaction()  # a savepoint
                await inner.start()
                await outbox.emit_async(conn, Event("x", {"at": "inner"}))
                await outbox.emit_many_async(conn, [Event("x", {}), Event("y", {})])
                await inner.rollback()
                kept.append(await outbox.emit_async(conn, Event("x", {"at": "after"})))
            return kept
        finally:
            await conn.close()

    kept = asyncio.run(scenario())
    assert event_ids(db_url) == sorted(kept)


def test_psycopg2_autocommit_inside_begin_is_accepted(db_url: str) -> None:
    """psycopg2 in autocommit mode, inside an explicit BEGIN: the event commits with the
    COMMIT (and a ROLLBACK takes it back)."""
    import psycopg2

    conn = psycopg2.connect(db_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            gone = outbox.emit(cur, Event("x", {}))
            cur.execute("ROLLBACK")
            cur.execute("BEGIN")
            kept = outbox.emit(conn, Event("x", {}))
            kept_many = outbox.emit_many(conn, [Event("x", {}), Event("y", {})])
            cur.execute("COMMIT")
            with pytest.raises(NotInTransaction):  # after COMMIT: autocommit again
                outbox.emit(conn, Event("x", {}))
    finally:
        conn.close()
    assert gone not in event_ids(db_url)
    assert event_ids(db_url) == sorted([kept, *kept_many])
