"""Wake on commit: idle workers are NOTIFYed by the transactions that give them
work, and only while some worker is idle.

The design ("idle sentinel"): at most one idle worker per database and schema, the
*sentinel*, holds the session advisory lock ``outbox._db.queries.WAKE_KEY`` exclusively on its
own listening connection. An emitting transaction that wrote deliveries tries that key in
shared mode (never waiting): if a sentinel holds it, or is waiting to take it, the try
fails and the transaction sends one payload-less ``pg_notify`` on the schema's channel; if
it succeeds, every worker is busy (each claims again by itself), no NOTIFY is sent, and
the shared lock is held until the transaction ends. A worker that wants to become the
sentinel therefore waits for those transactions to end, then claims once more: an event
committed without a NOTIFY is never left behind an idle worker. Every worker LISTENs
(a NOTIFY wakes all of them); only the sentinel needs to be armed.

Why not simply NOTIFY from every emitting transaction: a transaction that has NOTIFYed
takes a database-wide lock at commit and holds it across its commit's WAL flush, which
serialises the commits of concurrent notifying transactions (no group commit). Measured
here (``python -m bench.wakeup``, 2 cores, PostgreSQL 15, durable commits, 16 emitting
connections, while other test runs shared the machine):

============================  ===================  ==========================
design                        1 event per tx       100-event ``emit_many``
============================  ===================  ==========================
a NOTIFY in every transaction 0.55-0.78x of off    0.90x of off
idle sentinel (this module),  0.99-1.23x of off    0.97-1.09x of off
workers busy
============================  ===================  ==========================

("off": ``OUTBOX_WAKEUP=poll``, 4,100-5,800 transactions/s one event each.) The
sentinel design pays the NOTIFY only while a worker is idle, that is, while the emit rate
leaves the workers idle between claims; under load they are busy and emits pay one
uncontended shared advisory lock. A lone event reaches the receiver at p50 3.4 ms / p90
3.7 ms (poll mode at 50 ms: 31 / 49 ms). Alternatives not built: a trigger (one NOTIFY
per row: the worst case above); a debounced notifier process (River), which still needs
something to tell it about commits (polling, or a NOTIFY); logical decoding (needs
``wal_level=logical`` and a replication slot). The figures are in docs/performance.md.

Worker states: a claim that found nothing asks to be armed (:meth:`Waker.idle`); a claim
that found work disarms (:meth:`Waker.busy`), and the worker then re-claims on its own
(after each completion, and at least every ``BUSY_POLL_SECONDS``).

Guarantees and failure modes (none of them stalls delivery: the worker also polls, every
``OUTBOX_POLL_INTERVAL_SECONDS`` when idle, and at each pending row's due time):

- The listening connection dies (server restart, ``pg_terminate_backend``, network): its
  locks go with it, so emitters stop NOTIFYing or notify nobody; the worker polls until
  the connection is back (reconnected with jittered backoff), then claims once, since it
  may have missed a NOTIFY meanwhile.
- A lost NOTIFY (or a sentinel that is stuck, e.g. a half-open TCP connection the server
  has not noticed): the worker's poll picks the work up; emitters keep NOTIFYing until the
  server drops the dead session (TCP keepalives are on).
- An emitting transaction left open for long blocks arming for at most the lock timeout
  (``ARM_WAIT_SECONDS``); the worker claims and tries again, and emitters NOTIFY while it
  waits.
- The listener cannot LISTEN or arm although it connects (a hot standby, a read-only
  node): it backs off like a failed connection (the drops in a row count until LISTEN
  succeeds), polling meanwhile; one log line when it is lost, one when it listens again.
- Behind a transaction-mode pooler LISTEN and session locks do not work, and a session
  lock left on a shared server connection would make every emit NOTIFY: before LISTEN the
  listener checks that its connection is a session of its own
  (:func:`outbox.delivery.session.direct`); if not, it logs one warning and the worker
  polls instead (``OUTBOX_POLL_INTERVAL_SECONDS``, as with ``OUTBOX_WAKEUP=poll``) for the
  rest of its life. Give the workers a direct connection to have wake-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from outbox._db.connection import render
from outbox.delivery import queries, session
from outbox.delivery.settings import WorkerSettings
from outbox.settings import mask_url

log = logging.getLogger("outbox.worker")

BUSY_POLL_SECONDS = 0.05  # a busy worker (its last claim found work) claims at least this often
ARM_WAIT_SECONDS = 0.1  # how long arming waits for open emitting transactions


class Waker:
    """The worker's listening connection: LISTEN, arm/disarm, wake the claim loop.

    ``on_wake`` is called on every NOTIFY, after each (re)connection and after arming (the
    claim that closes the race with emitters that skipped the NOTIFY).
    """

    def __init__(self, settings: WorkerSettings, on_wake: Callable[[], None],
                 on_pooled: Callable[[], None] = lambda: None) -> None:
        self.settings = settings
        self.on_wake = on_wake
        self.on_pooled = on_pooled  # called once if the connection is not a session of ours
        self.lost = False  # the listener failed and has not listened again since
        self.armed = False  # this worker is the sentinel: emitters NOTIFY
        self.connected = False
        self.notifications = 0
        self._want = False  # the last claim found nothing
        self._elect = True  # try to become the sentinel on the next idle()
        self._changed = asyncio.Event()
        schema = settings.schema_name
        self._listen_sql = render(queries.WAKE_LISTEN, schema)
        self._arm_sql = render(queries.WAKE_ARM, schema)
        self._handover_sql = render(queries.WAKE_HANDOVER, schema)

    def idle(self) -> None:
        """The worker's claim found nothing: it wants NOTIFYs."""
        if not self._want or (not self.armed and self._elect):
            self._want = True
            self._changed.set()

    def busy(self) -> None:
        """The worker's claim found work: it will claim again by itself."""
        if self._want:
            self._want = False
            self._changed.set()

    async def run(self, stopped: asyncio.Event) -> None:
        """Keep a listening connection until ``stopped``; reconnect with backoff. Returns
        at once (after ``on_pooled``) if the connection is not a session of its own."""
        failures = 0
        while not stopped.is_set():
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.settings.database_url, autocommit=True, prepare_threshold=None,
                    keepalives=1, keepalives_idle=30, keepalives_interval=10,
                    keepalives_count=3)
                async with conn:
                    if not await session.direct(conn):
                        self._pooled()
                        return
                    await self._session(conn, stopped)
                return
            except psycopg.Error as exc:
                if self.connected:
                    failures = 0  # back off by the drops in a row, not in the process's life
                self.connected = self.armed = False
                failures += 1
                wait = min(5.0, 0.1 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                if not self.lost:  # one line per state change, not per reconnection
                    log.warning("wake-up listener lost (%s); polling, reconnecting with"
                                " backoff", _first_line(exc))
                self.lost = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stopped.wait()

    def _pooled(self) -> None:
        log.warning("OUTBOX_WAKEUP=notify needs a session of its own, and the connection"
                    " to %s goes through a pooler or proxy (the server sees another client"
                    " port): polling every %gs instead; give the workers a direct"
                    " connection for wake-ups, or set OUTBOX_WAKEUP=poll",
                    mask_url(self.settings.database_url), self.settings.poll_interval_seconds
                    or 0.05)
        self.on_pooled()

    async def _session(self, conn: psycopg.AsyncConnection[Any],
                       stopped: asyncio.Event) -> None:
        await conn.execute(queries.WAKE_LOCK_TIMEOUT, (f"{int(ARM_WAIT_SECONDS * 1000)}ms",))
        await conn.execute(self._listen_sql)
        self.connected, self._elect = True, True
        if self.lost:
            log.warning("wake-up listener listening again")
            self.lost = False
        self.on_wake()  # a NOTIFY may have gone unheard while this connection was down
        while not stopped.is_set():
            self._changed.clear()
            await self._sync(conn)
            await self._listen(conn, stopped)

    async def _sync(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Arm or disarm to match what the worker's last claim asked for."""
        if not self._want:
            if self.armed:
                await conn.execute(queries.WAKE_DISARM)
                self.armed = False
                await conn.execute(self._handover_sql)  # idle workers: arm in my place
            self._elect = True
            return
        if self.armed or not self._elect:
            return
        self._elect = False
        try:
            row = await (await conn.execute(self._arm_sql)).fetchone()
        except pg_errors.LockNotAvailable:  # an emitting transaction is still open
            self._elect = True
            self.on_wake()
            return
        self.armed = bool(row and row[0])
        if self.armed:
            self.on_wake()  # the claim after arming sees what non-notifying emitters wrote
        else:
            await conn.execute(queries.WAKE_DISARM)  # the sentinel lock may be held re-entrantly

    async def _listen(self, conn: psycopg.AsyncConnection[Any],
                      stopped: asyncio.Event) -> None:
        """Deliver NOTIFYs to ``on_wake`` until the worker changes its mind or stops."""
        reader = asyncio.create_task(self._read(conn))
        others = [asyncio.create_task(self._changed.wait()), asyncio.create_task(stopped.wait())]
        try:
            await asyncio.wait([reader, *others], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, *others):
                task.cancel()
            await asyncio.gather(reader, *others, return_exceptions=True)
        if reader.done() and not reader.cancelled():
            raise reader.exception() or psycopg.OperationalError("listening connection closed")

    async def _read(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async for _note in conn.notifies():
            self.notifications += 1
            self._elect = True  # the sentinel may be about to go busy: be ready to take over
            self.on_wake()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
