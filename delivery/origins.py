"""One origin's connections in the HTTP/1.1 pool (:mod:`.http1`): the idle ones, and how
fast new ones are opened.

A worker that starts against a backlog has hundreds of requests for one endpoint at once
(up to the per-endpoint cap, 250 a process by default). Opening a connection for each at
the same moment overflows a receiver's accept queue: the kernel drops the handshakes it
has no room for, and their requests are answered late or never. Measured (``bench.flow
--only limit50``: four workers, one receiver on the same two cores): 170 listen overflows
in a run's first second, and as many requests that timed out after 15 s and were retried.

So new connections ramp up as TCP's slow start does. At most :data:`OPEN_AT_ONCE`
connections to an origin are *unproven* (made, or being made, without a complete answer
yet), or as many as the origin has shown it takes, if more: the proven connections the
pool holds, or the first answers of new connections in the current and the previous
second (a receiver that closes every connection after its answer proves none that stay).
The pool of an origin so at most doubles per round trip: 16, 32, 64... A request with no
idle connection and no room to open one waits for whichever comes first: an idle
connection, or room. Waiters are served in order; a woken waiter that is cancelled
passes its turn on.

Pure bookkeeping, no I/O, one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Protocol

OPEN_AT_ONCE = 16
"""Unproven connections an origin may have at once before it has proven more."""


class Conn(Protocol):
    """What the origin needs of a connection (``http1._Connection``)."""

    idle_since: float
    closed: bool
    fresh: bool  # made by the pool, no answer on it yet
    proven: bool  # counted in Origin.proven

    def reusable(self) -> bool: ...

    def close(self) -> None: ...


class Origin:
    """The idle connections of one (scheme, host, port, TLS context), and its ramp."""

    __slots__ = ("_answers", "_second", "_waiters", "idle", "opening", "proven")

    def __init__(self) -> None:
        self.idle: list[Conn] = []
        self.opening = 0  # unproven connections: being made, or without an answer yet
        self.proven = 0  # connections held (idle or busy) that have had an answer
        self._answers = (0, 0)  # first answers in (the previous, the current) second
        self._second = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def checkout(self, now: float, keepalive: float) -> Conn | None:
        """An idle connection still fit for a request (the newest first), or None."""
        while self.idle:
            conn = self.idle.pop()
            if conn.reusable() and now - conn.idle_since < keepalive:
                return conn
            self.discard(conn)
        return None

    def may_open(self, now: float) -> bool:
        """Whether a request may open a new connection now (the ramp, module doc)."""
        return self.opening < max(OPEN_AT_ONCE, self.proven, self._recent(now))

    def opened(self, conn: Conn) -> None:
        """``conn`` was made for a request (counted unproven since :meth:`reserve`)."""
        conn.fresh = True

    def reserve(self) -> None:
        """A request starts making a connection: one more unproven."""
        self.opening += 1

    def unreserve(self) -> None:
        """Making the connection failed: one fewer unproven; the next waiter may try."""
        self.opening -= 1
        self.wake(1)

    def release(self, conn: Conn, *, answered: bool, now: float) -> None:
        """A request over ``conn`` ended (``answered``: with a complete answer): a fresh
        connection is no longer unproven, and proven if answered; the connection goes
        back to the idle ones if reusable, else it is closed. Wakes the waiters that the
        change makes room for."""
        woken = 0
        if conn.fresh:
            conn.fresh = False
            self.opening -= 1
            woken += 1
            if answered:
                conn.proven = True
                self.proven += 1
                self._count_answer(now)
                woken += 1
        if conn.reusable():
            conn.idle_since = now
            self.idle.append(conn)
            woken += 1
        else:
            self.discard(conn)
        self.wake(woken)

    def discard(self, conn: Conn) -> None:
        """Close ``conn`` and stop counting it."""
        conn.close()
        if conn.proven:
            conn.proven = False
            self.proven -= 1

    def sweep(self, now: float, keepalive: float) -> None:
        """Close the idle connections that will never be reused (closed by the receiver,
        idle for ``keepalive`` seconds or more)."""
        keep = [c for c in self.idle if not c.closed and now - c.idle_since < keepalive]
        for conn in self.idle:
            if conn not in keep:
                self.discard(conn)
        self.idle = keep

    def unused(self) -> bool:
        """Nothing held, nothing under way, nobody waiting: the entry can be dropped."""
        return not (self.idle or self.opening or self.proven or self._waiters)

    async def wait(self) -> None:
        """Until an idle connection or room to open one may be there (then check again)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.wake(1)  # woken, then cancelled: the turn goes to the next
            else:
                with contextlib.suppress(ValueError):  # (wake drops cancelled ones)
                    self._waiters.remove(fut)
            raise

    def wake(self, n: int) -> None:
        """Wake the ``n`` longest-waiting requests."""
        while n > 0 and self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                n -= 1

    def _count_answer(self, now: float) -> None:
        second = int(now)
        if second != self._second:
            previous = self._answers[1] if second == self._second + 1 else 0
            self._answers, self._second = (previous, 0), second
        self._answers = (self._answers[0], self._answers[1] + 1)

    def _recent(self, now: float) -> int:
        second = int(now)
        if second == self._second:
            return self._answers[0] + self._answers[1]
        return self._answers[1] if second == self._second + 1 else 0
