"""The worker's database side: claim and batched completion over a connection pool.

Each call is its own short autocommit transaction: the claim commits before any HTTP
request starts, and no transaction is ever open across an HTTP call. Connection-level
failures (server restart, network) are retried with jittered exponential backoff for as
long as the worker runs; they are logged, never fatal.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

import psycopg
import tenacity
from psycopg.rows import AsyncRowFactory, RowMaker, class_row, no_result
from psycopg_pool import AsyncConnectionPool

from outbox.db import render, translated
from outbox.delivery import queries
from outbox.delivery.jobs import Completion, Job
from outbox.delivery.settings import WorkerSettings
from outbox.secretbox import SecretBox

log = logging.getLogger("outbox.worker")
T = TypeVar("T")

# Errors a statement raises because of the values of some rows (SQLSTATE classes 22 and
# 23: out-of-range numbers or times, invalid text, constraint violations), as opposed to
# the connection or the schema: a batch failing with one is split to find the rows.
ROW_ERRORS = (psycopg.errors.DataError, psycopg.errors.IntegrityError)

_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_SECRET = _JOB_FIELDS.index("secret")  # previous_secret follows it
assert _JOB_FIELDS[_SECRET + 1] == "previous_secret"


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


def job_row(box: SecretBox) -> AsyncRowFactory[Job]:
    """Row factory: claim rows as :class:`Job`, secrets opened with ``box``.

    The result's column names must be exactly Job's fields (any order). Each result's raw
    names key a cache, so the names are resolved once per distinct column list (building
    ``cursor.description`` costs ~30 us a claim); each row is then built positionally
    (``class_row`` builds by keyword: ~3x slower on the hot path).
    """
    open_ = box.open
    pickers: dict[tuple[bytes | None, ...], Callable[[Sequence[Any]], Any]] = {}

    def factory(cursor: psycopg.AsyncCursor[Any]) -> RowMaker[Job]:
        res = cursor.pgresult
        if res is None or not res.nfields:  # no result, or a command's (no columns)
            return no_result
        raw = tuple(map(res.fname, range(res.nfields)))
        pick = pickers.get(raw)
        if pick is None:
            pick = pickers[raw] = _job_picker([c.name for c in cursor.description or ()])

        def make(values: Sequence[Any]) -> Job:
            v = list(pick(values))
            v[_SECRET] = open_(v[_SECRET])
            previous = v[_SECRET + 1]
            v[_SECRET + 1] = open_(previous) if previous else None
            return Job(*v)

        return make

    return factory


def _job_picker(names: list[str]) -> Callable[[Sequence[Any]], Any]:
    """A row's values in Job's field order, or TypeError if ``names`` are not its fields."""
    if sorted(names) != sorted(_JOB_FIELDS):
        raise TypeError(f"claim columns {names} are not Job's fields {list(_JOB_FIELDS)}")
    return itemgetter(*(names.index(f) for f in _JOB_FIELDS))


async def _read_committed(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pin READ COMMITTED on a new pool connection, whatever the server's, database's or
    role's default_transaction_isolation: the claim and the completion of ordered
    endpoints depend on it (migrations/0005_ordered.sql; the functions refuse to run under
    another level). Each statement is its own autocommit transaction, so the session's
    default is what applies. Behind a transaction-mode pooler a session setting may not
    stick: the functions then fail with a clear error instead of misordering."""
    await conn.execute("SET default_transaction_isolation = 'read committed'")


def _first_line(exc: BaseException | None) -> str:
    text = str(exc).strip() if exc else ""
    return text.splitlines()[0] if text else type(exc).__name__


class Store:
    """Claim and complete deliveries; owns the connection pool."""

    def __init__(self, settings: WorkerSettings, *, pool_size: int = 4) -> None:
        self.settings = settings
        self._claim_sql = render(queries.CLAIM, settings.schema_name)
        self._complete_sql = render(queries.COMPLETE, settings.schema_name)
        self._quarantine_sql = render(queries.QUARANTINE, settings.schema_name)
        self._any_due_sql = render(queries.ANY_DUE, settings.schema_name)
        self._next_due_sql = render(queries.NEXT_DUE, settings.schema_name)
        self.pool = AsyncConnectionPool(
            settings.database_url, min_size=1, max_size=pool_size, open=False,
            kwargs={"autocommit": True, "prepare_threshold": settings.prepare_threshold},
            # No check= on checkout: it costs a round trip and a transaction per statement
            # (half an idle worker's database load). A connection that died meanwhile (a
            # database restart) fails its statement with OperationalError, which
            # _retrying retries on a fresh connection; the pool drops the broken one.
            timeout=2.0,
            reconnect_timeout=365 * 86400.0,
            configure=_read_committed,
        )
        self.stopping: Callable[[], bool] = lambda: False
        self.on_error: Callable[[], None] = lambda: None
        self.on_poison: Callable[[Completion], None] = lambda c: None
        self.healthy = True  # False from a failed call until the next success
        self._backlog_sql = render(queries.BACKLOG, settings.schema_name)
        self._push_sql = render(queries.PUSH_ENDPOINT, settings.schema_name)
        self._job_row = job_row(settings.secret_box())

    async def open(self) -> None:
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    async def _retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op``, retrying connection failures until it succeeds or the worker stops.

        The first try runs bare (no retry machinery on the hot path); a connection
        failure hands over to :meth:`_backing_off` as that machinery's first attempt."""
        try:
            result = await op()
        except psycopg.OperationalError as exc:
            if self.stopping():
                raise
            return await self._backing_off(op, exc)
        except psycopg.Error:
            with translated():  # e.g. SchemaMissing: fatal, with a one-line reason
                raise
        self.healthy = True
        return result

    async def _backing_off(self, op: Callable[[], Awaitable[T]],
                           first_failure: psycopg.OperationalError) -> T:
        """:meth:`_retrying` after ``first_failure``: logged and waited out with jittered
        exponential backoff, then ``op`` again, until it succeeds or the worker stops."""
        failures = [first_failure]

        async def attempt() -> T:
            if failures:
                raise failures.pop()
            return await op()

        retryer = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(
                lambda e: isinstance(e, psycopg.OperationalError) and not self.stopping()
            ),
            wait=tenacity.wait_exponential_jitter(multiplier=0.2, max=5.0, jitter=0.5),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            result: T = await retryer(attempt)
            self.healthy = True
            return result
        except psycopg.OperationalError:
            raise
        except psycopg.Error:
            with translated():  # e.g. SchemaMissing: fatal, with a one-line reason
                raise

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        self.healthy = False
        self.on_error()
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("database unavailable (%s); retry %d in %.1fs", _first_line(exc),
                    state.attempt_number, wait)

    async def claim(self, limit: int) -> list[Job]:
        """Lease up to ``limit`` due deliveries (committed before returning)."""
        token = uuid.uuid4()
        params = {"limit": limit, "lease": self.settings.lease_seconds, "token": token}

        async def op() -> list[Job]:
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=self._job_row)
                return await (await cur.execute(self._claim_sql, params)).fetchall()

        return await self._retrying(op)

    async def complete(self, done: Sequence[Completion]) -> int:
        """Record ``done`` in one statement; returns how many were not fenced out.

        Poison isolation: if the statement fails on the data of some rows (a
        :data:`ROW_ERRORS` error, e.g. a retry delay overflowing a timestamp), the batch is
        split in halves and each half written on its own, down to the offending rows,
        which are dead-lettered with the database's error (:meth:`_quarantine`). The
        others are recorded once, as if nothing happened. The common path is one
        statement; the split costs O(poison rows x log2(batch)) statements, on failure
        only."""
        async def op() -> int:
            async with self.pool.connection() as conn:
                return await self._complete_on(conn, done)

        return await self._retrying(op)

    async def _complete_on(self, conn: psycopg.AsyncConnection[Any],
                           done: Sequence[Completion]) -> int:
        params = _completion_params(done, self.settings.worker_id)
        try:
            cur = await conn.execute(self._complete_sql, params)
        except ROW_ERRORS as exc:
            return await self._split(conn, done, exc)
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def _split(self, conn: psycopg.AsyncConnection[Any], done: Sequence[Completion],
                     exc: psycopg.Error) -> int:
        """``done`` failed with ``exc``: a lone row is the poison, else write each half."""
        if len(done) == 1:
            return await self._quarantine(conn, done[0], exc)
        mid = len(done) // 2
        return (await self._complete_on(conn, done[:mid])
                + await self._complete_on(conn, done[mid:]))

    async def _quarantine(self, conn: psycopg.AsyncConnection[Any], c: Completion,
                          exc: psycopg.Error) -> int:
        """Dead-letter the delivery of ``c``, whose completion alone fails with ``exc``;
        logged once and counted (``on_poison``). If even that write fails on its data, the
        row is left to its lease (logged)."""
        reason = _first_line(exc)
        error = _clean(f"result not recordable ({reason}); attempt {c.attempt}: "
                       f"{c.outcome}{f' ({c.error})' if c.error else ''}")
        params = {"id": c.delivery_id, "token": c.token, "status": c.status, "error": error,
                  "attempt": c.attempt, "duration": c.duration_ms,
                  "worker": self.settings.worker_id}
        try:
            row = await (await conn.execute(self._quarantine_sql, params)).fetchone()
        except ROW_ERRORS as again:
            log.error("delivery %d: result not recordable (%s) nor quarantinable (%s): left"
                      " to its lease", c.delivery_id, reason, _first_line(again))
            self.on_poison(c)
            return 0
        log.error("delivery %d dead-lettered: its result is not recordable (%s); the rest of"
                  " its batch was recorded", c.delivery_id, reason,
                  extra={"delivery_id": c.delivery_id, "error": error})
        self.on_poison(c)
        return int(row[0]) if row else 0

    async def push_endpoint(self, endpoint_id: uuid.UUID, seconds: float) -> int:
        """Hide an endpoint's pending deliveries for ``seconds`` (circuit breaker)."""
        params = {"endpoint": endpoint_id, "seconds": seconds}

        async def op() -> int:
            async with self.pool.connection() as conn:
                return (await conn.execute(self._push_sql, params)).rowcount

        return await self._retrying(op)

    async def backlog(self) -> Backlog:
        """The alerting numbers (:class:`Backlog`)."""
        async def op() -> Backlog:
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=_BACKLOG_ROW)
                row = await (await cur.execute(self._backlog_sql)).fetchone()
                return row or Backlog(0, 0.0, 0)

        return await self._retrying(op)

    async def any_due(self) -> bool:
        async def op() -> bool:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(self._any_due_sql)).fetchone()
                return bool(row and row[0])

        return await self._retrying(op)

    async def next_due(self) -> float | None:
        """Seconds until the earliest pending delivery comes due (<= 0: due now); None
        if nothing is pending."""
        async def op() -> float | None:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(self._next_due_sql)).fetchone()
                return float(row[0]) if row and row[0] is not None else None

        return await self._retrying(op)


def _completion_params(done: Sequence[Completion], worker: str) -> dict[str, Any]:
    return {
        "ids": [c.delivery_id for c in done],
        "tokens": [c.token for c in done],
        "states": [c.state for c in done],
        "delays": [c.delay for c in done],
        "refunds": [c.refund for c in done],
        "statuses": [c.status for c in done],
        "errors": [c.error for c in done],
        "outcomes": [c.outcome for c in done],
        "attempts": [c.attempt for c in done],
        "durations": [c.duration_ms for c in done],
        "classes": [c.error_class for c in done],
        "excerpts": [_clean(c.excerpt) for c in done],
        "gone": list({c.gone_endpoint for c in done if c.gone_endpoint}),
        "worker": worker,
    }


def _clean(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL; a receiver's body may."""
    return text.replace("\x00", "\ufffd") if text else text
