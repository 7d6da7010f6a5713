"""Batched completion: the worker's results recorded many at a time.

Guarantees:

- A result handed to :meth:`Recorder.record` is written by :meth:`Store.complete
  <outbox.delivery.store.Store.complete>`, one statement per batch of up to
  :data:`FLUSH_MAX`, fenced by its claim's lease token; it commits with the operational
  events it causes, or not at all. Until it commits the delivery stays leased: a crash
  (even SIGKILL) before then sends it again after its lease, never loses it.
- While requests are in flight, a flush of fewer than ``FLUSH_MAX // 10`` results waits
  :data:`FLUSH_GATHER_SECONDS` for more first (fewer, larger completion transactions); a
  stopping worker flushes at once.
- A database outage is waited out by the store; a failure while stopping is logged and
  its batch left to its lease (delivered again), never raised past the worker's exit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from outbox.delivery.jobs import Completion
from outbox.delivery.metrics import Metrics
from outbox.delivery.store import Store

log = logging.getLogger("outbox.worker")
FLUSH_MAX = 500
FLUSH_GATHER_SECONDS = 0.002  # a small flush's wait for more results while busy


class Recorder:
    """Collect results and write them in batches (:meth:`run`, one task per worker)."""

    def __init__(self, store: Store, metrics: Metrics, stats: dict[str, int], *,
                 busy: Callable[[], bool], stopped: Callable[[], bool],
                 retry_scheduled: Callable[[], None]) -> None:
        self.store, self.metrics, self.stats = store, metrics, stats
        self._busy = busy  # requests in flight: more results will come
        self._stopped = stopped
        self._retry_scheduled = retry_scheduled  # a recorded retry made a row due later
        self._done: list[Completion] = []
        self._flushing = False  # a batch taken off _done is being written
        self._have_done = asyncio.Event()

    def record(self, done: Completion) -> None:
        self._done.append(done)
        self._have_done.set()

    def pending(self) -> bool:
        """Results not yet committed (queued, or being written)."""
        return bool(self._done) or self._flushing

    def wake(self) -> None:
        """Look again now (the worker stopped)."""
        self._have_done.set()

    async def run(self) -> None:
        """Record results until the worker stopped and nothing is in flight."""
        while True:
            await self._have_done.wait()
            if len(self._done) < FLUSH_MAX // 10 and self._busy() and not self._stopped():
                await asyncio.sleep(FLUSH_GATHER_SECONDS)
            self._have_done.clear()
            while self._done:
                batch, self._done = self._done[:FLUSH_MAX], self._done[FLUSH_MAX:]
                await self._flush(batch)
            if self._stopped() and not self._busy():
                return

    async def _flush(self, batch: list[Completion]) -> None:
        self._flushing = True
        try:
            applied = await self.store.complete(batch)
        except Exception:
            if not self._stopped():
                raise
            log.exception("could not record %d results while stopping: they will be"
                          " delivered again after their lease", len(batch))
            return
        finally:
            self._flushing = False
        self._count(batch, applied)
        self.stats["flushes"] += 1
        if any(c.state == "pending" and c.delay < float("inf") for c in batch):
            self._retry_scheduled()

    def _count(self, batch: list[Completion], applied: int) -> None:
        for c in batch:
            key = {"delivered": "delivered", "dead": "dead"}.get(c.state, "retry")
            if c.outcome not in ("parked", "deferred"):
                self.stats[key] += 1
        self.stats["fenced"] += len(batch) - applied
        self.metrics.fenced(len(batch) - applied)
