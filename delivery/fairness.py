"""Per-endpoint in-flight caps and circuit breakers: one bad endpoint cannot stall the rest.

Process-local, pure bookkeeping (no I/O); the worker acts on its answers:

- **In-flight cap.** At most ``cap`` requests to one endpoint are in flight in this process
  (endpoint's ``max_in_flight``, else ``OUTBOX_ENDPOINT_MAX_IN_FLIGHT``). The claim is told
  what is in flight here per endpoint whose free slots could bind it
  (:meth:`EndpointGate.claim_budgets`) and takes no more rows of an endpoint than its free
  slots, so a hanging endpoint holds at most ``cap`` of the worker's slots, and a busy
  endpoint's rows wait in the database, not in the process nor in hand-back writes. A
  claimed row that still cannot start (a breaker that opened between claim and start; a
  cap lowered below what is in flight, once) is handed back untouched (attempt refunded)
  after a short jittered delay, and counted (``outbox_handbacks_total``).
- **Circuit breaker.** ``threshold`` consecutive failures (timeouts, connection errors,
  5xx...) open the endpoint's breaker for ``cooldown`` seconds. Consecutive by when the
  requests started: the failure of a request started before one that has since succeeded
  is old news (the endpoint answered the later one) and neither counts nor resets the
  count. Measured: after a burst of connections at a worker's start overflowed a
  receiver's accept queue, ~150 requests sent in the first second timed out together 15 s
  later, amid thousands of successes sent after them, and opened the breaker of a
  healthy endpoint for 30 s (bench.flow ``limit50``, 2 of 5 runs). The worker pushes the
  endpoint's pending rows past the cooldown (other processes then skip them too) and its
  claims take none of them meanwhile. After the cooldown one probe request is let through
  (half-open): success closes the breaker, failure re-opens it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

DEFER_SECONDS = 0.5
BLOCKED = 1 << 30  # in-flight count that leaves no slot whatever the cap


@dataclass(slots=True)
class _State:
    in_flight: int = 0
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False
    answered: float = float("-inf")  # start of the latest-started request that succeeded
    cap: int = 0  # the endpoint's cap as its latest admitted job gave it (0: default)


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
        state.cap = cap or 0
        if state.open_until:
            state.probing = True
        elif state.in_flight >= (cap or self.default_cap):
            return DEFER_SECONDS * (1 + random.random())
        state.in_flight += 1
        return None

    def now(self) -> float:
        """The gate's clock: what :meth:`release`'s ``started`` is read on."""
        return self._clock()

    def release(self, endpoint: UUID, *, failed: bool, started: float | None = None,
                reached: bool = True) -> float | None:
        """Account a finished request, started at ``started`` (:meth:`now`; None: now).
        Returns the cooldown if this failure opened the breaker (the caller pushes the
        endpoint's pending rows), else None. A failure of a request started before the
        latest-started one that succeeded does not count (see the module's doc).
        ``reached=False``: nothing reached the endpoint (a job that could not be sent, a
        refused address): a failure counts, a success neither resets the count, nor
        closes the breaker, nor makes earlier-started failures old news."""
        state = self._state(endpoint)
        state.in_flight = max(state.in_flight - 1, 0)
        probe, state.probing = state.probing, False
        started = self._clock() if started is None else started
        if not failed and not reached:
            return None
        if not failed:
            state.failures, state.open_until = 0, 0.0
            state.answered = max(state.answered, started)
            return None
        if reached and started < state.answered and not probe:
            return None
        state.failures += 1
        if probe or (state.failures >= self.threshold and not state.open_until):
            state.open_until = self._clock() + self.cooldown
            return self.cooldown
        return None

    def is_open(self, endpoint: UUID) -> bool:
        return self._state(endpoint).open_until > self._clock()

    def open_for(self, endpoint: UUID) -> float:
        """Seconds until the endpoint's open breaker half-opens (0: not open)."""
        state = self._states.get(endpoint)
        return max(state.open_until - self._clock(), 0.0) if state else 0.0

    def claim_budgets(self, limit: int | None = None) -> tuple[list[UUID], list[int]]:
        """The claim's ``used_ids`` / ``used_counts``: requests in flight here per endpoint;
        an endpoint that may take nothing now (breaker open, or half-open with its probe
        out) is given BLOCKED, so the claim's budget for it is 0. A half-open endpoint
        with no probe out is not listed: the first of its rows becomes the probe, the
        rest are handed back.

        With ``limit`` (the claim's size), an endpoint is listed only while its free slots
        (its cap as its latest job gave it, minus what is in flight) are fewer than
        ``limit``: a claim takes at most ``limit`` rows in all, so a budget of ``limit``
        or more binds nothing, and the claim's budget of an unlisted endpoint, its whole
        cap, is one too. With 1,000 endpoints in flight, sending and dumping every count
        cost 8% of the worker's CPU (py-spy, bench.flow slow). An endpoint whose cap was
        lowered since its latest job may be claimed over the new cap once; those rows
        are handed back at start (counted)."""
        ids: list[UUID] = []
        counts: list[int] = []
        now = self._clock()
        for endpoint, state in self._states.items():
            if state.open_until and (state.open_until > now or state.probing
                                     or state.in_flight):
                ids.append(endpoint)
                counts.append(BLOCKED)
            elif state.in_flight and (limit is None or (state.cap or self.default_cap)
                                      - state.in_flight < limit):
                ids.append(endpoint)
                counts.append(state.in_flight)
        return ids, counts
