"""Per-endpoint in-flight caps and circuit breakers: one bad endpoint cannot stall the rest.

Process-local, pure bookkeeping (no I/O); the worker acts on its answers:

- **In-flight cap.** At most ``cap`` requests to one endpoint are in flight in this process
  (endpoint's ``max_in_flight``, else ``OUTBOX_ENDPOINT_MAX_IN_FLIGHT``). Up to ``cap`` more
  claimed deliveries wait in the process for that endpoint's next free slot
  (:class:`HeldJobs`, counted against the worker's capacity, never held past the point
  where their lease could run out mid-request); beyond that they are handed back untouched
  (attempt refunded) to be claimed again after a short jittered delay. So a hanging
  endpoint holds at most ``2 * cap`` of the worker's slots, and a single busy endpoint is
  not re-claimed over and over.
- **Circuit breaker.** ``threshold`` consecutive failures (timeouts, connection errors,
  5xx...) open the endpoint's breaker for ``cooldown`` seconds: the worker pushes the
  endpoint's pending rows past the cooldown (other processes then skip them too) and hands
  back any it still claims. After the cooldown one probe request is let through (half-open):
  success closes the breaker, failure re-opens it.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from outbox.delivery.jobs import Job

if TYPE_CHECKING:
    from outbox.delivery.settings import WorkerSettings

DEFER_SECONDS = 0.5


@dataclass(slots=True)
class _State:
    in_flight: int = 0
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False


class EndpointGate:
    """Admission decisions per endpoint."""

    def __init__(self, *, default_cap: int, threshold: int, cooldown: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default_cap = default_cap
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self._states: dict[UUID, _State] = {}

    def _state(self, endpoint: UUID) -> _State:
        state = self._states.get(endpoint)
        if state is None:
            state = self._states[endpoint] = _State()
        return state

    def admit(self, endpoint: UUID, cap: int | None = None) -> float | None:
        """None: send now (counted in flight). Otherwise: hand back, visible again after
        the returned number of seconds."""
        state = self._state(endpoint)
        now = self._clock()
        if state.open_until > now:
            return state.open_until - now
        if state.open_until and (state.probing or state.in_flight):
            return DEFER_SECONDS * (1 + random.random())  # half-open: one probe at a time
        if state.open_until:
            state.probing = True
        elif state.in_flight >= (cap or self.default_cap):
            return DEFER_SECONDS * (1 + random.random())
        state.in_flight += 1
        return None

    def release(self, endpoint: UUID, *, failed: bool) -> float | None:
        """Account a finished request. Returns the cooldown if this failure opened the
        breaker (the caller pushes the endpoint's pending rows), else None."""
        state = self._state(endpoint)
        state.in_flight = max(state.in_flight - 1, 0)
        probe, state.probing = state.probing, False
        if not failed:
            state.failures, state.open_until = 0, 0.0
            return None
        state.failures += 1
        if probe or (state.failures >= self.threshold and not state.open_until):
            state.open_until = self._clock() + self.cooldown
            return self.cooldown
        return None

    def is_open(self, endpoint: UUID) -> bool:
        return self._state(endpoint).open_until > self._clock()


class HeldJobs:
    """Claimed jobs waiting in this process for their endpoint's in-flight slot."""

    def __init__(self, settings: WorkerSettings, clock: Callable[[], float] = time.monotonic):
        self._settings = settings
        self._clock = clock
        self._queues: dict[UUID, deque[tuple[float, Job]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def hold(self, job: Job) -> bool:
        """Keep ``job`` (True) unless its endpoint already has ``cap`` waiting."""
        queue = self._queues.setdefault(job.endpoint_id, deque())
        if len(queue) >= (job.max_in_flight or self._settings.default_endpoint_cap):
            return False
        queue.append((self._clock(), job))
        self._count += 1
        return True

    def take(self, endpoint: UUID, *, everything: bool) -> Iterator[tuple[Job, bool]]:
        """The next held job (or all), each with whether it can still safely be sent:
        held no longer than its lease minus its request timeout (and a second)."""
        queue = self._queues.get(endpoint)
        while queue:
            held_since, job = queue.popleft()
            self._count -= 1
            timeout = self._settings.endpoint_timeout(job.timeout_seconds)
            fresh = self._clock() - held_since < self._settings.lease_seconds - timeout - 1.0
            yield job, fresh
            if not everything and fresh:
                return

    def endpoints(self) -> list[UUID]:
        return [e for e, q in self._queues.items() if q]
