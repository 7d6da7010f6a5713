"""The delivery loop: claim -> signed POST -> batched completion.

Guarantees:

- At-least-once: a delivery leaves ``pending`` only through a recorded completion. A
  worker that crashes (even SIGKILL) leaves its claimed rows pending with ``visible_at``
  at the end of their lease; any worker reclaims them after it. The receiver may then
  see a ``webhook-id`` twice; it never sees one never.
- No transaction is held across HTTP: the claim commits first; results are recorded
  later, in batches (:mod:`outbox.delivery.recorder`).
- At most ``concurrency`` requests in flight per process; claims are sized to the free
  capacity, never larger. A process with fewer than a quarter of a claim's worth of free
  slots (``min(batch_size, concurrency) // 4``) waits up to :data:`GATHER_SECONDS` for more
  to free up before it claims, so a busy process claims (and records) in larger batches;
  whatever is free then is claimed (a claim is never delayed longer).
- ``stop()`` (SIGTERM/SIGINT): claims stop at once; in-flight requests get
  ``shutdown_grace_seconds`` to finish and be recorded; the rest are cancelled and come
  back after their lease. ``run`` then returns normally.
- A database outage is logged and waited out with backoff; the worker neither exits nor
  spins. A read-only node (a standby, a primary being demoted) counts as an outage: the
  worker reconnects until it reaches one that takes writes (:mod:`outbox.delivery.store`).
  ``/readyz`` answers 503 meanwhile, and while a call hangs (``database_stall_seconds``).
- Wake-up (``OUTBOX_WAKEUP=notify``, :mod:`outbox.delivery.wakeup`): an idle worker is
  woken by the NOTIFY of a commit that gave it work, and sleeps otherwise until the
  earliest pending row comes due or ``poll_interval`` passes, whichever is first; a lost
  NOTIFY or listening connection costs at most that poll interval, never a stall. With
  ``poll``, it claims every ``poll_interval`` while idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any

import psycopg

from outbox.delivery.attempted import completed, poisoned_completion
from outbox.delivery.fairness import EndpointGate
from outbox.delivery.jobs import Completion, Job
from outbox.delivery.metrics import Metrics
from outbox.delivery.outcome import Verdict
from outbox.delivery.policy import defer, park
from outbox.delivery.recorder import Recorder
from outbox.delivery.request import send_job
from outbox.delivery.retention_task import partition_loop, prune_loop
from outbox.delivery.sender import Transport
from outbox.delivery.settings import WorkerSettings
from outbox.delivery.store import Store
from outbox.delivery.throttle import PUSH_PAUSE_SECONDS, Signal, Throttle
from outbox.delivery.wakeup import BUSY_POLL_SECONDS, Waker
from outbox.errors import OutboxError

log = logging.getLogger("outbox.worker")
COALESCE_SECONDS = 0.002
GATHER_SECONDS = 0.005  # longest wait of a nearly full process for more free slots


class Worker:
    """One process's delivery loop. Create, then ``await run()``; ``stop()`` ends it."""

    def __init__(self, settings: WorkerSettings, transport: Transport,
                 store: Store | None = None) -> None:
        self.settings = settings
        self.transport = transport
        self.store = store or Store(settings)
        self.metrics = Metrics()
        self.gate = EndpointGate(default_cap=settings.default_endpoint_cap,
                                 threshold=settings.breaker_threshold,
                                 cooldown=settings.breaker_cooldown_seconds)
        self.throttle = Throttle(pause_max=settings.retry_after_max_seconds)
        self._stopped = asyncio.Event()
        self.store.stopping = self._stopped.is_set
        self.store.on_error = self.metrics.database_errors.inc
        self.store.on_poison = lambda _c: self.metrics.poisoned.inc()
        self._inflight: set[asyncio.Task[None]] = set()
        self._side_tasks: set[asyncio.Task[int]] = set()
        self._deferred_at = -1e9
        self._empty_due = 0  # claims in a row that found nothing while rows were due
        self._gather_until = 0.0  # end of the current wait for free slots (_gather)
        self._wake = asyncio.Event()
        self.waker = (Waker(settings, self._wake.set, on_pooled=self._poll_instead)
                      if settings.wakeup == "notify" else None)
        self.stats = {"claimed": 0, "delivered": 0, "retry": 0, "dead": 0, "fenced": 0,
                      "handbacks": 0, "claims": 0, "flushes": 0}
        self.recorder = Recorder(self.store, self.metrics, self.stats,
                                 busy=lambda: bool(self._inflight),
                                 stopped=self._stopped.is_set,
                                 retry_scheduled=self._retry_scheduled)

    def _poll_instead(self) -> None:
        """No wake-ups through a pooler: poll as ``OUTBOX_WAKEUP=poll`` would."""
        self.waker = None
        self.settings = self.settings.model_copy(update={"wakeup": "poll"})
        self._wake.set()

    def stop(self) -> None:
        """Stop claiming; ``run`` finishes in-flight work within the grace period."""
        if not self._stopped.is_set():
            log.info("stopping: no new claims; %d in flight", len(self._inflight))
        self._stopped.set()
        self._wake.set()

    def ready(self) -> tuple[bool, str]:
        """Readiness: the database answered the last call, no call has been running for
        longer than ``database_stall_seconds``, and the worker is not stopping."""
        if self._stopped.is_set():
            return False, "stopping"
        if not self.store.healthy:
            read_only = self.store.down_reason.startswith("read-only")
            return False, "database unavailable" + (" (read-only)" if read_only else "")
        stalled = self.store.stalled_seconds()
        if stalled > self.settings.database_stall_seconds:
            return False, f"database not answering: a statement has run for {stalled:.0f}s"
        return True, "ready"

    async def _stall_loop(self) -> None:
        """One log line when a database call starts to take longer than
        ``database_stall_seconds`` (a hung synchronous commit), one when that ends."""
        limit, stalled = self.settings.database_stall_seconds, False
        while not self._stopped.is_set():
            now = self.store.healthy and self.store.stalled_seconds() > limit
            if now != stalled:
                stalled = now
                if stalled:
                    log.warning("database not answering: a statement has run for over %.0fs"
                                " (a commit waiting for a synchronous standby?)", limit)
                else:
                    log.warning("database answering again")
            await asyncio.sleep(min(1.0, limit / 4))

    async def run(self, *, drain: bool = False) -> None:
        """Deliver until ``stop()``; with ``drain``, also return once nothing is due."""
        await self.store.open()
        flusher = asyncio.create_task(self.recorder.run(), name="outbox-flush")
        gauges = asyncio.create_task(self._backlog_loop(), name="outbox-backlog")
        watch = asyncio.create_task(self._stall_loop(), name="outbox-stall")
        pruner = partitioner = None
        if not drain:  # prunes unless retention_seconds is 0; repairs ordered keys
            pruner = asyncio.create_task(prune_loop(self.settings, self._stopped))
            partitioner = asyncio.create_task(partition_loop(self.settings, self._stopped),
                                              name="outbox-partitions")
        listener = None
        if self.waker is not None and not drain:
            listener = asyncio.create_task(self.waker.run(self._stopped), name="outbox-wakeup")
        try:
            await self._claim_loop(drain)
            await self._finish_inflight()
        finally:
            self._stopped.set()
            self.recorder.wake()
            gauges.cancel()
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            for task in (gauges, watch):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if pruner is not None:
                await pruner
            if partitioner is not None:
                await partitioner
            if listener is not None:
                await listener
            await self.store.close()

    async def _backlog_loop(self) -> None:
        while not self._stopped.is_set():
            with contextlib.suppress(OutboxError, psycopg.Error):
                backlog = await self.store.backlog()
                self.metrics.due_backlog.set(backlog.due)
                self.metrics.oldest_due_age.set(backlog.oldest_seconds)
                self.metrics.largest_tenant_backlog.set(backlog.largest_tenant)
                self.metrics.blocked_keys.set(backlog.blocked_keys)
                self.metrics.blocked_deliveries.set(backlog.blocked_deliveries)
                self.metrics.allowed_rates(await self.store.allowed_rates())
            await asyncio.sleep(self.settings.backlog_interval_seconds)

    async def _claim_loop(self, drain: bool) -> None:
        cfg = self.settings
        while not self._stopped.is_set():
            free = cfg.concurrency - len(self._inflight)
            if free <= 0:
                self._wake.clear()  # a slot freeing up (or stop) is what matters here
                if self._stopped.is_set():
                    break
                await self._wait(None)
                continue
            if await self._gather(free):
                continue
            limit = min(free, cfg.batch_size)
            # Cleared before the claim, never inside _wait: a wake-up (a NOTIFY, the arm's
            # follow-up, a completion) that arrives while this claim or the idle loop's
            # next-due query runs stays set and makes the next wait return at once.
            self._wake.clear()
            claimed_at = time.time()  # admission time (throttle: once per congestion event)
            jobs = await self.store.claim(limit, *self.gate.claim_budgets(limit))
            self.stats["claimed"] += len(jobs)
            self.stats["claims"] += 1
            self.metrics.claimed_per_poll.observe(len(jobs))
            started = sum(self._start(job, claimed_at) for job in jobs)
            self.metrics.in_flight.set(len(self._inflight))
            if started < len(jobs):
                self._deferred_at = time.monotonic()
            if jobs and len(jobs) == limit:
                continue  # more may be due: claim again at once
            if drain and not jobs and await self._drained():
                return
            if jobs:
                # Short of the limit: the due rows left are over their endpoints' budgets
                # (or there are none). Let a few slots free up before the next claim, so
                # one busy endpoint is claimed in batches, not one row per completion.
                await asyncio.sleep(COALESCE_SECONDS)
            await self._pause(found=bool(jobs), drain=drain)

    async def _gather(self, free: int) -> bool:
        """True after a wait for more free slots (the caller looks again): while fewer
        than a quarter of a claim's worth are free and requests are in flight, for at
        most GATHER_SECONDS from the first look; False when the claim should go now."""
        cfg = self.settings
        now = time.monotonic()
        if free >= min(cfg.batch_size, cfg.concurrency) // 4 or not self._inflight:
            self._gather_until = 0.0
            return False
        if not self._gather_until:
            self._gather_until = now + GATHER_SECONDS
        if now >= self._gather_until:
            self._gather_until = 0.0
            return False
        self._wake.clear()  # a slot freeing up (or stop) is what matters here
        await self._wait(self._gather_until - now)
        return True

    async def _drained(self) -> bool:
        """Nothing in flight, nothing to record or being recorded (a completion may make the
        next delivery of an ordered key due), nothing handed back just now, nothing due."""
        busy = self._inflight or self.recorder.pending()
        if busy or time.monotonic() - self._deferred_at < 2.0:
            return False
        return not await self.store.any_due()

    def _start(self, job: Job, claimed_at: float) -> bool:
        """Send ``job`` now (True), or park it (disabled endpoint) or hand it back to the
        queue, counted (the claim budgets each endpoint's free slots, so this happens only
        when a breaker opened or half-opened between the claim and now, or once after the
        endpoint's max_in_flight was lowered below what is in flight here)."""
        if not job.enabled:
            self._record(park(job))
            return False
        delay = self.gate.admit(job.endpoint_id, job.max_in_flight)
        if delay is None:
            self._launch(job, claimed_at)
            return True
        self.metrics.handbacks.inc()
        self.stats["handbacks"] += 1
        self._record(defer(job, delay))
        return False

    def _launch(self, job: Job, claimed_at: float) -> None:
        task = asyncio.create_task(self._deliver(job, claimed_at))
        self._inflight.add(task)
        task.add_done_callback(self._task_done)

    async def _pause(self, *, found: bool, drain: bool) -> None:
        """Between claims. Poll mode (or drain): the poll interval. Notify mode: a claim
        that found work re-claims soon (each completion also wakes it); one that found
        nothing arms the wake-up and sleeps until a NOTIFY, the earliest pending row's due
        time, or the poll interval (a fallback tick costs one query, not a claim). Rows
        that are due but over their endpoints' budgets (every slot of theirs busy here,
        no send tokens left) are claimed again after a wait that doubles from 2 ms to
        BUSY_POLL_SECONDS (a completion, freeing a slot, ends it at once)."""
        poll = self.settings.poll_seconds
        if found:
            self._empty_due = 0
        if self.waker is None or drain:
            await self._wait(poll if found else min(poll, self._due_backoff()))
            return
        if found:
            self.waker.busy()
            await self._wait(min(poll, BUSY_POLL_SECONDS))
            return
        self.waker.idle()
        while not self._stopped.is_set():
            due_in = await self.store.next_due()
            if due_in is not None and due_in <= 0:  # due, but held or over budget
                await self._wait(min(poll, self._due_backoff()))
                return
            self._empty_due = 0
            timeout = poll if due_in is None else min(poll, due_in + 0.001)
            if await self._wait(timeout) or timeout < poll:
                return

    def _due_backoff(self) -> float:
        self._empty_due += 1
        return min(0.002 * 2.0 ** min(self._empty_due - 1, 10), BUSY_POLL_SECONDS)

    async def _wait(self, timeout: float | None) -> bool:
        """Sleep until a slot frees, a wake-up, ``timeout`` or stop(); True if woken (at
        once if a wake-up came since the last claim: the flag is cleared only there)."""
        if self._wake.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()
                return True
        return False

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self.metrics.in_flight.set(len(self._inflight))
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery task failed", exc_info=task.exception())

    async def _deliver(self, job: Job, claimed_at: float) -> None:
        """Send ``job`` (claimed by the claim that started at ``claimed_at``,
        ``time.time()``), then record its completion. A retry is never due before the end
        of an open breaker's cooldown (the claims would not take it before anyway)."""
        failed, done, reached, started = True, None, True, self.gate.now()
        try:
            sent_at = time.time()
            self.throttle.sent(job.endpoint_id)
            try:
                result = await send_job(self.transport, job, self.settings,
                                        timestamp=int(sent_at))
                done = completed(job, result, self.settings, self.metrics)
            except Exception as exc:  # isolated: this job only
                done, failed, reached = poisoned_completion(job, exc, self.metrics), False, False
                return
            # a 429 is an answer, not a failure: throttling handles it, not the breaker
            failed = result.verdict is Verdict.RETRY and result.status_code != 429
            # refused before sending (SSRF): says nothing of the endpoint (a broker's
            # publish is DELIVERED without a status: it reached it)
            reached = failed or result.status_code is not None \
                or result.verdict is Verdict.DELIVERED
            signal = self.throttle.observe(job.endpoint_id, result, claimed_at)
            if signal is not None:
                self._on_throttle(signal)
        finally:
            cooldown = self.gate.release(job.endpoint_id, failed=failed, started=started,
                                         reached=reached)
            if done is not None:
                hold = self.gate.open_for(job.endpoint_id)
                if hold and done.state == "pending" and done.delay < hold:
                    done = done._replace(delay=hold)
                self._record(done)
            if cooldown is not None and not self._stopped.is_set():
                log.warning("endpoint circuit open for %.0fs", cooldown,
                            extra={"endpoint_id": str(job.endpoint_id)})
                self._side(self.store.push_endpoint(job.endpoint_id, cooldown))

    def _on_throttle(self, signal: Signal) -> None:
        """Slow the endpoint down for every worker (and pause it on Retry-After)."""
        self.metrics.throttled(signal.endpoint_id)
        if self._stopped.is_set():
            return
        log.info("endpoint throttled%s", f": paused {signal.pause:.1f}s" if signal.pause else "",
                 extra={"endpoint_id": str(signal.endpoint_id)})
        self._side(self.store.throttle(signal.endpoint_id, signal.observed, signal.pause,
                                       signal.admitted_at))
        if signal.pause >= PUSH_PAUSE_SECONDS:  # idle workers then sleep through it
            self._side(self.store.push_endpoint(signal.endpoint_id, signal.pause))

    def _side(self, coro: Coroutine[Any, Any, int]) -> None:
        task = asyncio.create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_done)

    def _side_done(self, task: asyncio.Task[int]) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("flow-control update failed: %s", task.exception())

    def _record(self, done: Completion) -> None:
        self.recorder.record(done)

    def _retry_scheduled(self) -> None:
        if self.waker:
            self._wake.set()  # re-read the next due time: a retry was just scheduled

    async def _finish_inflight(self) -> None:
        if not self._inflight:
            return
        grace = self.settings.shutdown_grace_seconds
        _done, pending = await asyncio.wait(set(self._inflight), timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("%d deliveries still in flight after %.0fs grace: left to their lease",
                        len(pending), grace)
            await asyncio.gather(*pending, return_exceptions=True)
