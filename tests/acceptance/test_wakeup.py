"""Wake on commit: behaviour, not timings (the figures are in bench.wakeup).

Workers here poll every 60 s, so an event delivered within a few seconds was delivered
because something woke the worker: the emitting commit's NOTIFY, the reconnection of a
killed listener, or the due time of a retry it scheduled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

import outbox
from outbox._db.connection import render
from outbox.admin.migrations import migrate
from outbox.delivery import queries as wq
from outbox.delivery.sender import make_transport
from outbox.delivery.settings import WorkerSettings
from outbox.delivery.worker import Worker
from outbox.settings import Settings
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, settings, states

SLOW_POLL = 60.0  # never the reason a test passes
OTHER = "outbox_other"


async def until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@asynccontextmanager
async def running(cfg: WorkerSettings) -> AsyncIterator[Worker]:
    """A worker running in this event loop, idle and armed before the block starts."""
    async with make_transport() as transport:
        worker = Worker(cfg, transport)
        task = asyncio.create_task(worker.run())
        try:
            if worker.waker is not None:
                assert await until(lambda: worker.waker is not None and worker.waker.armed)
            yield worker
        finally:
            worker.stop()
            await task


async def emit_one(db_url: str, schema: str = SCHEMA, wakeup: str = "notify") -> None:
    s = Settings(database_url=db_url, schema_name=schema, wakeup=wakeup)  # type: ignore[arg-type]

    def go() -> None:
        with psycopg.connect(db_url) as c:
            outbox.emit(c, outbox.Event("test.event", {"n": 1}), settings=s)
            c.commit()

    await asyncio.to_thread(go)


def test_idle_worker_is_woken_by_the_emitting_commit(db_url: str) -> None:
    async def scenario(rx: Receiver) -> None:
        async with running(settings(db_url, poll_interval_seconds=SLOW_POLL)) as worker:
            for n in (1, 2, 3):  # each lone event into an idle, re-armed worker
                await emit_one(db_url)
                assert await until(lambda n=n: len(rx.received) == n)  # type: ignore[misc]
                assert await until(lambda: worker.waker is not None and worker.waker.armed)
            assert worker.waker is not None and worker.waker.notifications >= 3

    with Receiver(secret=SECRET) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        asyncio.run(scenario(rx))
    assert states(db_url) == {"delivered": 3}


def test_emit_notifies_once_per_transaction_and_only_while_a_worker_is_idle(
        db_url: str, conn: psycopg.Connection[Any]) -> None:
    add_endpoint(db_url, "http://127.0.0.1:9/hook")
    cfg = settings(db_url)
    with psycopg.connect(db_url, autocommit=True) as sentinel:
        sentinel.execute(render(wq.WAKE_LISTEN, SCHEMA))

        def heard() -> int:
            sentinel.execute("SELECT 1")  # notifications arrive with the next answer
            return len(list(sentinel.notifies(timeout=0.2)))

        def emit(n: int, wakeup: str = "notify", commit: bool = True) -> None:
            s = Settings(database_url=db_url, schema_name=SCHEMA, wakeup=wakeup)  # type: ignore[arg-type]
            for i in range(n):
                outbox.emit(conn, outbox.Event("test.event", {"i": i}), settings=s)
            outbox.emit_many(conn, [outbox.Event("test.event", {})] * 3, settings=s)
            conn.commit() if commit else conn.rollback()

        emit(2)
        assert heard() == 0  # no worker idle: busy workers claim by themselves
        armed = sentinel.execute(render(wq.WAKE_ARM, SCHEMA)).fetchone()
        assert armed == (True,)
        emit(3)
        assert heard() == 1  # one NOTIFY for the whole transaction
        emit(2, commit=False)
        assert heard() == 0  # a rollback wakes nobody
        emit(2, wakeup="poll")
        assert heard() == 0  # OUTBOX_WAKEUP=poll: emit never notifies
        sentinel.execute(wq.WAKE_DISARM)
        emit(1)
        assert heard() == 0
    assert cfg.poll_seconds == 0.05  # tests' settings poll fast; the default is 5 s


def test_two_schemas_do_not_wake_each_other(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        migrate(c, OTHER)

    async def scenario(rx: Receiver) -> None:
        a = settings(db_url, poll_interval_seconds=SLOW_POLL)
        b = settings(db_url, poll_interval_seconds=SLOW_POLL, schema_name=OTHER)
        async with running(a) as wa, running(b) as wb:
            assert wa.waker is not None and wb.waker is not None
            await emit_one(db_url, OTHER)
            assert await until(lambda: len(rx.received) == 1)
            await asyncio.sleep(0.2)  # a stray NOTIFY would have arrived by now
            # B hears the emit's NOTIFY (and its own hand-over when it goes busy); A nothing
            assert wa.waker.notifications == 0 and wb.waker.notifications >= 1
            assert wa.stats["claimed"] == 0 and wb.stats["claimed"] == 1

    with Receiver(secret=SECRET) as rx:
        with psycopg.connect(db_url, autocommit=True) as c:
            outbox.admin.endpoints.add(c, rx.url + "/b", schema=OTHER, secret=SECRET)
        add_endpoint(db_url, rx.url + "/a")
        asyncio.run(scenario(rx))


def test_killed_listener_is_reestablished_and_nothing_stalls(db_url: str) -> None:
    def listener_pid() -> int | None:
        with psycopg.connect(db_url, autocommit=True) as c:
            # the listener's sentinel lock (delivery/queries/wakeup.py), not any advisory
            # lock: the partition manager holds one of its own for a moment on each pass
            row = c.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                            " AND mode = 'ExclusiveLock' AND granted AND objsubid = 2"
                            " AND classid = hashtext('outbox.wakeup.sentinel')::oid"
                            " AND objid = hashtext(%s)::oid"
                            " AND database = (SELECT oid FROM pg_database"
                            " WHERE datname = current_database()) LIMIT 1",
                            (f'"{SCHEMA}"',)).fetchone()  # {schema} renders quoted
            return int(row[0]) if row else None

    async def armed_pid(timeout: float = 5.0) -> int | None:
        """The listener's pid once it holds the sentinel: an idle worker re-arms after
        each claim that found work, so the lock comes and goes while it delivers."""
        deadline = time.monotonic() + timeout
        while (pid := await asyncio.to_thread(listener_pid)) is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.02)
        return pid

    async def scenario(rx: Receiver) -> None:
        async with running(settings(db_url, poll_interval_seconds=SLOW_POLL)) as worker:
            waker = worker.waker
            assert waker is not None
            first = await armed_pid()
            assert first is not None
            with psycopg.connect(db_url, autocommit=True) as c:
                c.execute("SELECT pg_terminate_backend(%s)", (first,))
            await emit_one(db_url)  # while the listener is down or coming back
            assert await until(lambda: len(rx.received) == 1)
            assert await until(lambda: waker.connected and waker.armed)
            second = await armed_pid()
            assert second is not None and second != first
            await emit_one(db_url)  # woken by NOTIFY again on the new connection
            assert await until(lambda: len(rx.received) == 2)

    with Receiver(secret=SECRET) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        asyncio.run(scenario(rx))
    assert states(db_url) == {"delivered": 2}


def test_poll_mode_still_delivers(db_url: str) -> None:
    async def scenario(rx: Receiver) -> None:
        cfg = settings(db_url, wakeup="poll", poll_interval_seconds=0.2)
        async with running(cfg) as worker:
            assert worker.waker is None
            await emit_one(db_url, wakeup="poll")
            assert await until(lambda: len(rx.received) == 1)

    with Receiver(secret=SECRET) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        asyncio.run(scenario(rx))


def test_retry_is_claimed_at_its_due_time_not_the_next_poll(db_url: str) -> None:
    async def scenario(rx: Receiver) -> None:
        async with running(settings(db_url, poll_interval_seconds=SLOW_POLL)):
            await emit_one(db_url)
            assert await until(lambda: len(rx.received) == 2)

    with Receiver(secret=SECRET) as rx:
        rx.script("/flaky", [Behaviour(status=503), Behaviour(status=200)])
        add_endpoint(db_url, rx.url + "/flaky", retry_base_seconds=1.0, retry_cap_seconds=1.0)
        asyncio.run(scenario(rx))
    assert states(db_url) == {"delivered": 1}


@pytest.mark.parametrize(("mode", "expected"), [("notify", 5.0), ("poll", 0.05)])
def test_default_poll_interval_follows_the_wakeup_mode(mode: str, expected: float) -> None:
    cfg = WorkerSettings(wakeup=mode, database_url="postgresql://x/y")  # type: ignore[arg-type]
    assert cfg.poll_seconds == expected


def test_a_busy_sentinel_hands_over_to_an_idle_worker(db_url: str) -> None:
    """A is the idle sentinel; B, idle too, lost the election. When A goes busy it
    disarms and tells the listeners, so B arms in its place (else nobody would be armed
    and emitters would skip the NOTIFY until B's next poll)."""
    from outbox.delivery.wakeup import Waker

    async def scenario() -> None:
        stopped = asyncio.Event()
        cfg = settings(db_url, poll_interval_seconds=SLOW_POLL)
        b_started = asyncio.Event()

        def b_woken() -> None:  # B's worker: woken, claims nothing, goes idle again
            if b_started.is_set():
                b.idle()

        a, b = Waker(cfg, lambda: None), Waker(cfg, b_woken)
        tasks = [asyncio.create_task(w.run(stopped)) for w in (a, b)]
        try:
            a.idle()
            assert await until(lambda: a.armed)
            b_started.set()
            b.idle()
            assert await until(lambda: b.connected and not b._elect)  # tried, and lost
            assert not b.armed
            a.busy()
            assert await until(lambda: b.armed), "B did not take over from the busy sentinel"
            assert not a.armed
        finally:
            stopped.set()
            await asyncio.gather(*tasks)

    asyncio.run(scenario())
