"""The wake-up listener on a node where connecting works but LISTEN does not (a hot
standby: SQLSTATE 25006, "cannot execute LISTEN during recovery"): it backs off and logs
once, instead of reconnecting several times a second."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest

from outbox.delivery.wakeup import Waker
from tests.support.workers import settings

# What a hot standby answers to LISTEN, raised by the real server with the real SQLSTATE.
STANDBY_LISTEN = ("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '25006',"
                  " MESSAGE = 'cannot execute LISTEN during recovery'; END $$")


class CountingWaker(Waker):
    sessions = 0

    async def _session(self, conn: psycopg.AsyncConnection[Any],
                       stopped: asyncio.Event) -> None:
        self.sessions += 1
        await super()._session(conn, stopped)


def test_listen_refused_backs_off_and_logs_once(db_url: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    waker = CountingWaker(settings(db_url, wakeup="notify"), lambda: None)
    waker._listen_sql = STANDBY_LISTEN

    async def main() -> None:
        stopped = asyncio.Event()
        task = asyncio.create_task(waker.run(stopped))
        await asyncio.sleep(3.0)
        stopped.set()
        await task

    with caplog.at_level(logging.WARNING, logger="outbox.worker"):
        asyncio.run(main())
    # backoff 0.1-0.2, 0.2-0.4, 0.4-0.8, 0.8-1.6, 1.6-3.2 s: at most 6 tries in 3 s
    # (without it: a try every 0.1-0.2 s, 15 or more)
    assert 2 <= waker.sessions <= 6, waker.sessions
    lost = [r for r in caplog.records if "wake-up listener lost" in r.getMessage()]
    assert len(lost) == 1
    assert not waker.connected
