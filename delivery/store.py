"""The worker's database side: claim and batched completion.

Each call is its own short READ COMMITTED transaction (:mod:`outbox.delivery.connections`:
pipelined, nothing left on the session): the claim commits before any HTTP request
starts, and no transaction is ever open across an HTTP call. Outages -- the connection
failed, the server restarts, the node is read-only (a standby, a primary being demoted) --
are waited out for as long as the worker runs (:meth:`Store._retrying`), with one log
line when the database goes and one when it is back; never fatal, never a spin.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import psycopg
from psycopg.rows import class_row

from outbox._db.connection import outage, read_only, render, translated
from outbox.delivery import arrays, queries
from outbox.delivery.connections import Connections
from outbox.delivery.jobs import Completion, Job, Unloaded, claimed_position, job_row, load_each
from outbox.delivery.raw import RawStatement
from outbox.delivery.settings import WorkerSettings

log = logging.getLogger("outbox.worker")
T = TypeVar("T")
RETRY_MAX = 1.0  # seconds: the longest wait between two tries during an outage
# The claim's floor (delivery/queries/claim.py): re-read this often (seconds); before the
# first read, the lowest bigint (every partition).
FLOOR_EVERY = 1.0
NO_FLOOR = -(1 << 63)
# The claim runs on a generic plan while deliveries and events have at most this many
# partitions in all, on prepared statements only (queries.GENERIC_PLAN says why and what it
# costs; with OUTBOX_PREPARE_THRESHOLD=none each claim would be planned generic, anew).
GENERIC_PLAN_MAX_PARTITIONS = 64

# Errors a statement raises because of the values of some rows (SQLSTATE classes 22 and
# 23: out-of-range numbers or times, invalid text, constraint violations), as opposed to
# the connection or the schema: a batch failing with one is split to find the rows.
ROW_ERRORS = (psycopg.errors.DataError, psycopg.errors.IntegrityError)

class Backlog(NamedTuple):
    """Due deliveries, the age in seconds of the oldest, the due deliveries of the tenant
    with the most among the oldest 10,000, and the ordered keys a dead head blocks with the
    deliveries queued behind them -- the alerting numbers."""

    due: int
    oldest_seconds: float
    largest_tenant: int
    blocked_keys: int = 0
    blocked_deliveries: int = 0


_BACKLOG_ROW = class_row(Backlog)


def _by_uuid(pair: tuple[uuid.UUID, int]) -> int:
    return pair[0].int


def _first_line(exc: BaseException | None) -> str:
    text = str(exc).strip() if exc else ""
    return text.splitlines()[0] if text else type(exc).__name__


def _kind(exc: BaseException) -> str:
    return "read-only" if read_only(exc) else "unreachable"


Op = Callable[[bool], Awaitable[T]]
"""A database call; its argument: connect anew instead of reusing an idle connection."""


class Store:
    """Claim and complete deliveries; owns the worker's connections."""

    def __init__(self, settings: WorkerSettings, *, pool_size: int = 4) -> None:
        self.settings = settings
        # the two long statements of every batch, converted to $n once (outbox.delivery.raw)
        self._claim_sql = RawStatement(render(queries.CLAIM, settings.schema_name))
        self._floor_sql = render(queries.CLAIM_FLOOR, settings.schema_name)
        self._complete_sql = RawStatement(render(queries.COMPLETE, settings.schema_name))
        self._quarantine_sql = render(queries.QUARANTINE, settings.schema_name)
        self._any_due_sql = render(queries.ANY_DUE, settings.schema_name)
        self._next_due_sql = render(queries.NEXT_DUE, settings.schema_name)
        self.connections = Connections(settings.database_url, size=pool_size,
                                       prepare_threshold=settings.prepare_threshold)
        self.stopping: Callable[[], bool] = lambda: False
        self.on_error: Callable[[], None] = lambda: None
        self.healthy = True  # False from a failed retry until the next success
        self.down_reason = ""  # why, while not healthy
        self._down_since = 0.0
        self._running: dict[object, float] = {}  # database calls in progress: their start
        self._claim_after: str | None = None  # the claim's rotation position (queries.CLAIM)
        # the claim's floor (queries.CLAIM, CLAIM_FLOOR) and when it was last read
        self._claim_floor = NO_FLOOR
        self._floor_read_at = -FLOOR_EVERY
        self._generic_claim = False  # until the first read of the partitions
        self.on_poison: Callable[[Completion], None] = lambda c: None
        self._backlog_sql = render(queries.BACKLOG, settings.schema_name)
        self._push_sql = render(queries.PUSH_ENDPOINT, settings.schema_name)
        self._throttle_sql = render(queries.THROTTLE, settings.schema_name)
        self._flow_gauges_sql = render(queries.FLOW_GAUGES, settings.schema_name)
        self._job_row = job_row(settings.secret_box())

    async def open(self) -> None:
        """Nothing to do: connections are made when a call needs one."""

    async def close(self) -> None:
        await self.connections.close()

    def stalled_seconds(self) -> float:
        """How long the oldest try of a database call in progress has been running (0:
        none; the waits between the tries of an outage do not count)."""
        return time.monotonic() - min(self._running.values()) if self._running else 0.0

    async def _retrying(self, op: Op[T], *, reads: bool = False) -> T:
        """Run ``op``, waiting out outages (:func:`outbox._db.connection.outage`: the connection
        failed, the server restarts, the node is read-only) until it succeeds or the
        worker stops; any other error is fatal, translated (e.g. SchemaMissing). Its
        success ends an outage, except that an ``op`` that only ``reads`` does not end a
        read-only one (a read-only node answers reads: the gauges' reads succeeding there
        must not turn readiness back on while every claim fails).

        After a failure ``op`` is tried again at once on a new connection (a connection
        that died while idle fails its next statement, and the idle ones beside it likely
        died too); if that fails as well, the outage is logged once and ``op`` is retried
        with jittered exponential backoff capped at :data:`RETRY_MAX` seconds, each time on
        a new connection, so delivery resumes within that cap of the database answering."""
        key = object()
        self._running[key] = time.monotonic()
        try:
            try:
                result = await op(False)
            except psycopg.Error as exc:
                if not outage(exc) or self.stopping():
                    with translated():
                        raise
                    raise  # pragma: no cover (translated always raises)
                self.on_error()
                result = await self._waiting_out(op, exc, key)
        finally:
            del self._running[key]
        if not self.healthy and not (reads and self.down_reason.startswith("read-only")):
            self._recovered()
        return result

    async def _waiting_out(self, op: Op[T], failure: psycopg.Error, key: object) -> T:
        for attempt in itertools.count():
            if attempt:
                self._went_down(failure)
                wait = min(RETRY_MAX, 0.05 * 2 ** min(attempt, 10))
                await asyncio.sleep(wait * random.uniform(0.5, 1.0))
            self._running[key] = time.monotonic()  # a stall is one try that hangs
            try:
                return await op(True)
            except psycopg.Error as exc:
                if not outage(exc) or self.stopping():
                    with translated():
                        raise
                    raise  # pragma: no cover
                self.on_error()
                failure = exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _went_down(self, exc: BaseException) -> None:
        """One log line per change of state: available -> unreachable or read-only."""
        reason = f"{_kind(exc)}: {_first_line(exc)}"
        if self.healthy or _kind(exc) != self.down_reason.split(":")[0]:
            if self.healthy:
                self._down_since = time.monotonic()
            log.warning("database unavailable (%s); waiting it out, retrying at least every"
                        " %.0fs", reason, RETRY_MAX)
        self.healthy = False
        self.down_reason = reason

    def _recovered(self) -> None:
        log.warning("database available again after %.1fs",
                    time.monotonic() - self._down_since)
        self.healthy = True
        self.down_reason = ""

    async def claim(self, limit: int, used_ids: Sequence[uuid.UUID] = (),
                    used_counts: Sequence[int] = ()) -> list[Job]:
        """Lease up to ``limit`` due deliveries (committed before returning), never more of
        an endpoint than its budget: its cap minus ``used_counts`` (this process's requests
        in flight to ``used_ids``) and, when flow-controlled, its send tokens (taken in the
        same transaction)."""
        token = uuid.uuid4()
        # sorted by id (as PostgreSQL orders uuids: their bytes, big-endian): the claim
        # finds an endpoint's count by binary search (queries.BUDGET)
        used = sorted(zip(used_ids, used_counts, strict=True), key=_by_uuid)
        params = self._claim_sql.params({
            "limit": limit, "lease": self.settings.lease_seconds, "token": token,
            "used_ids": [u[0] for u in used], "used_counts": [u[1] for u in used],
            "default_cap": self.settings.default_endpoint_cap, "floor": self._claim_floor,
            "after": self._claim_after})
        read_floor = time.monotonic() - self._floor_read_at >= FLOOR_EVERY
        generic = self._generic_claim

        async def op(fresh: bool) -> tuple[list[Job], list[Unloaded]]:
            async with self.connections.transaction(fresh=fresh) as conn:
                if generic:  # prepared at once: an unnamed statement's generic plan is
                    await conn.execute(queries.GENERIC_PLAN)  # made anew each time
                cur = psycopg.AsyncRawCursor(conn, row_factory=self._job_row)
                await cur.execute(self._claim_sql.text, params, prepare=generic or None)
                floor = await conn.execute(self._floor_sql) if read_floor else None
            after, empty = claimed_position(cur.pgresult)
            unloaded: list[Unloaded] = []
            try:
                jobs = [] if empty else await cur.fetchall()
            except psycopg.DataError:  # a value of some row Python cannot hold: those rows
                jobs, unloaded = await load_each(cur)  # only (dead-lettered below)
            self._claim_after = after
            if floor is not None:  # for the next claims
                got = await floor.fetchone()
                self._claim_floor = int(got[0]) if got and got[0] is not None else NO_FLOOR
                self._generic_claim = (self.settings.prepare_threshold is not None
                                       and got is not None
                                       and got[1] <= GENERIC_PLAN_MAX_PARTITIONS)
                self._floor_read_at = time.monotonic()
            return jobs, unloaded

        jobs, unloaded = await self._retrying(op)
        if unloaded:
            await self._dead_unloaded(unloaded)
        return jobs

    async def _dead_unloaded(self, rows: Sequence[Unloaded]) -> None:
        """Dead-letter claimed rows that could not be loaded (leased, never sent), each
        logged once and counted (``on_poison``); the rest of their claim goes on."""
        done = [Completion(
            delivery_id=r.delivery_id, token=r.token, state="dead", delay=0.0, refund=0,
            status=None, error=_clean(f"could not be loaded: {r.error}"), outcome="poisoned",
            attempt=r.attempt, duration_ms=0.0, error_class="poisoned", excerpt=None)
            for r in rows]
        for c in done:
            log.error("delivery %d dead-lettered unsent: its row %s", c.delivery_id, c.error,
                      extra={"delivery_id": c.delivery_id})
            self.on_poison(c)
        await self.complete(done)

    async def complete(self, done: Sequence[Completion]) -> int:
        """Record ``done`` in one statement; returns how many were not fenced out.

        Poison isolation: if the statement fails on the data of some rows (a
        :data:`ROW_ERRORS` error, e.g. a retry delay overflowing a timestamp), the batch is
        split in halves and each half written in a transaction of its own, down to the
        offending rows, which are dead-lettered with the database's error
        (:meth:`_quarantine`). The others are recorded once, as if nothing happened. The
        common path is one statement; the split costs O(poison rows x log2(batch))
        statements, on failure only."""
        params = self._complete_sql.params(_completion_params(
            done, self.settings.worker_id, self.settings.failing_threshold))

        async def op(fresh: bool) -> int | psycopg.Error:
            try:
                async with self.connections.transaction(fresh=fresh) as conn:
                    cur = psycopg.AsyncRawCursor(conn)
                    await cur.execute(self._complete_sql.text, params)
            except ROW_ERRORS as exc:  # the data of some row: split, below
                return exc
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        result = await self._retrying(op)
        if not isinstance(result, psycopg.Error):
            return result
        if len(done) == 1:
            return await self._quarantine(done[0], result)
        mid = len(done) // 2
        return await self.complete(done[:mid]) + await self.complete(done[mid:])

    async def _quarantine(self, c: Completion, exc: psycopg.Error) -> int:
        """Dead-letter the delivery of ``c``, whose completion alone fails with ``exc``;
        logged once and counted (``on_poison``). If even that write fails on its data, the
        row is left to its lease (logged)."""
        reason = _first_line(exc)
        error = _clean(f"result not recordable ({reason}); attempt {c.attempt}: "
                       f"{c.outcome}{f' ({c.error})' if c.error else ''}")
        params = {"id": c.delivery_id, "token": c.token, "status": c.status, "error": error,
                  "attempt": c.attempt, "duration": c.duration_ms,
                  "worker": self.settings.worker_id}

        async def op(fresh: bool) -> int | psycopg.Error:
            try:
                async with self.connections.transaction(fresh=fresh) as conn:
                    cur = await conn.execute(self._quarantine_sql, params)
            except ROW_ERRORS as again:
                return again
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        result = await self._retrying(op)
        self.on_poison(c)
        if isinstance(result, psycopg.Error):
            log.error("delivery %d: result not recordable (%s) nor quarantinable (%s): left"
                      " to its lease", c.delivery_id, reason, _first_line(result))
            return 0
        log.error("delivery %d dead-lettered: its result is not recordable (%s); the rest of"
                  " its batch was recorded", c.delivery_id, reason,
                  extra={"delivery_id": c.delivery_id, "error": error})
        return result

    async def push_endpoint(self, endpoint_id: uuid.UUID, seconds: float) -> int:
        """Hide an endpoint's pending deliveries for ``seconds`` (circuit breaker)."""
        params = {"endpoint": endpoint_id, "seconds": seconds}

        async def op(fresh: bool) -> int:
            async with self.connections.transaction(fresh=fresh) as conn:
                cur = await conn.execute(self._push_sql, params)
            return cur.rowcount

        return await self._retrying(op)

    async def throttle(self, endpoint_id: uuid.UUID, observed: float, pause: float,
                       admitted_at: float) -> int:
        """Cut the endpoint's allowed rate for every worker and pause it ``pause`` seconds
        (:data:`outbox.delivery.queries.THROTTLE`); 1 if its state changed."""
        from outbox.delivery.throttle import DECREASE, INCREASE, SLOW_START

        params = {"endpoint": endpoint_id, "observed": observed, "pause": pause,
                  "admitted_at": admitted_at, "decrease": DECREASE, "increase": INCREASE,
                  "slow_start": SLOW_START}

        async def op(fresh: bool) -> int:
            async with self.connections.transaction(fresh=fresh) as conn:
                cur = await conn.execute(self._throttle_sql, params)
            return cur.rowcount

        return await self._retrying(op)

    async def allowed_rates(self) -> list[tuple[uuid.UUID, float]]:
        """(endpoint, requests per second allowed; -1: paused) of flow-controlled ones."""
        async def op(fresh: bool) -> list[tuple[uuid.UUID, float]]:
            async with self.connections.transaction(fresh=fresh) as conn:
                cur = await conn.execute(self._flow_gauges_sql)
            return [(r[0], float(r[1])) for r in await cur.fetchall()]

        return await self._retrying(op, reads=True)

    async def backlog(self) -> Backlog:
        """The alerting numbers (:class:`Backlog`)."""
        async def op(fresh: bool) -> Backlog:
            async with self.connections.transaction(fresh=fresh) as conn:
                cur = conn.cursor(row_factory=_BACKLOG_ROW)
                await cur.execute(self._backlog_sql)
            return await cur.fetchone() or Backlog(0, 0.0, 0)

        return await self._retrying(op, reads=True)

    async def any_due(self) -> bool:
        async def op(fresh: bool) -> bool:
            async with self.connections.transaction(fresh=fresh) as conn:
                cur = await conn.execute(self._any_due_sql)
            row = await cur.fetchone()
            return bool(row and row[0])

        return await self._retrying(op, reads=True)

    async def next_due(self) -> float | None:
        """Seconds until the earliest pending delivery comes due (<= 0: due now); None
        if nothing is pending."""
        async def op(fresh: bool) -> float | None:
            async with self.connections.transaction(fresh=fresh) as conn:
                cur = await conn.execute(self._next_due_sql)
            row = await cur.fetchone()
            return float(row[0]) if row and row[0] is not None else None

        return await self._retrying(op, reads=True)


def _completion_params(done: Sequence[Completion], worker: str,
                       failing_after: int) -> dict[str, Any]:
    """COMPLETE's parameters: its arrays as text literals (:mod:`outbox.delivery.arrays`:
    psycopg's array dumpers cost ~4 us a delivery here), cast to their types by the SQL."""
    return {
        "ids": arrays.integers([c.delivery_id for c in done]),
        "tokens": arrays.uuids([c.token for c in done]),
        "states": arrays.texts([c.state for c in done]),
        "delays": arrays.floats([c.delay for c in done]),
        "refunds": arrays.integers([c.refund for c in done]),
        "statuses": arrays.integers([c.status for c in done]),
        "errors": arrays.texts([c.error for c in done]),
        "outcomes": arrays.texts([c.outcome for c in done]),
        "attempts": arrays.integers([c.attempt for c in done]),
        "durations": arrays.floats([c.duration_ms for c in done]),
        "classes": arrays.texts([c.error_class for c in done]),
        "excerpts": arrays.texts([_clean(c.excerpt) for c in done]),
        "gone": list({c.gone_endpoint for c in done if c.gone_endpoint}),
        "worker": worker,
        "failing_after": failing_after,
    }


def _clean(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL; a receiver's body may."""
    return text.replace("\x00", "\ufffd") if text else text
