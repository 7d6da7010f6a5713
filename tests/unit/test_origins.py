"""The HTTP pool's per-origin ramp (outbox.delivery.origins): how many connections may be
unproven at once, and waiters that are woken in order, also when one is cancelled."""

from __future__ import annotations

import asyncio

from outbox.delivery.origins import OPEN_AT_ONCE, Origin


class FakeConn:
    def __init__(self, *, keep: bool = True) -> None:
        self.idle_since = 0.0
        self.closed = False
        self.fresh = self.proven = False
        self.keep = keep

    def reusable(self) -> bool:
        return self.keep and not self.closed

    def close(self) -> None:
        self.closed = True


def _open(origin: Origin, now: float) -> FakeConn:
    assert origin.may_open(now)
    origin.reserve()
    conn = FakeConn()
    origin.opened(conn)
    return conn


def test_unproven_connections_are_capped_until_the_origin_answers() -> None:
    origin = Origin()
    first = [_open(origin, 10.0) for _ in range(OPEN_AT_ONCE)]
    assert not origin.may_open(10.0)
    for conn in first:  # all answered, kept: 16 proven, room for 16 more unproven
        origin.release(conn, answered=True, now=10.1)
    assert origin.proven == OPEN_AT_ONCE and origin.opening == 0
    reused = [origin.checkout(10.2, 30.0) for _ in range(OPEN_AT_ONCE)]
    assert all(c is not None for c in reused)  # the idle ones are reused first
    second = [_open(origin, 10.2) for _ in range(OPEN_AT_ONCE)]
    assert not origin.may_open(10.2)
    for conn in second:
        origin.release(conn, answered=True, now=10.3)
    assert origin.proven == 2 * OPEN_AT_ONCE
    failed = _open(origin, 10.4)
    origin.release(failed, answered=False, now=10.5)  # unanswered: not proven
    assert origin.proven == 2 * OPEN_AT_ONCE and origin.opening == 0


def test_first_answers_count_when_the_receiver_closes_every_connection() -> None:
    origin = Origin()
    for _ in range(2):
        conns = [_open(origin, 5.0) for _ in range(OPEN_AT_ONCE)]
        for conn in conns:
            conn.keep = False
            origin.release(conn, answered=True, now=5.5)
    assert origin.proven == 0 and origin.opening == 0
    opened = 0
    while origin.may_open(6.0):
        _open(origin, 6.0)
        opened += 1
    assert opened == 2 * OPEN_AT_ONCE  # 32 first answers in the current and last second
    origin.unreserve()
    assert not origin.may_open(8.0)  # answers two seconds old: back to 16 (31 unproven)


def test_a_woken_waiter_that_is_cancelled_passes_its_turn_on() -> None:
    async def go() -> list[str]:
        origin = Origin()
        order: list[str] = []

        async def waiter(name: str) -> None:
            await origin.wait()
            order.append(name)

        first = asyncio.create_task(waiter("first"))
        second = asyncio.create_task(waiter("second"))
        await asyncio.sleep(0)
        origin.wake(1)  # the first is woken...
        first.cancel()  # ...and cancelled before it runs: the second gets the turn
        await asyncio.sleep(0.01)
        await asyncio.gather(first, return_exceptions=True)
        await asyncio.wait_for(second, 1.0)
        return order

    assert asyncio.run(go()) == ["second"]
