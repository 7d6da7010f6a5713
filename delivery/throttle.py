"""Adaptive throttling: an endpoint that answers 429 or 503, or times out, is slowed down
for every worker; ``Retry-After`` pauses it as a whole.

The state lives in the endpoint's ``endpoint_flow`` row (migrations/0008_flow_control.sql),
which every claim reads (delivery/queries/claim.py BUDGET), so one process's signal slows all
processes and hosts at their next claim. Pure bookkeeping here; the worker runs the
statement (:data:`outbox.delivery.queries.THROTTLE`) as a side task.

AIMD, as TCP's congestion control: a signal multiplies the endpoint's allowed rate by
``DECREASE`` (0.7) once per congestion event, however many processes and requests report
it: only an answer to a request claimed after the last cut, and a second or more after
it, cuts again (the others were admitted under the old rate, or answer a receiver still
counting the burst before the cut), as TCP cuts once per window; the rate then grows back
linearly by ``INCREASE`` (7%) of the rate it was cut to (at least 1/s), each second
without another cut.
Multiplicative decrease gets under an unknown receiver limit in a few rounds from any
start (0.7^n); additive increase probes back up gently, so the rate saws between 70%
and 100% of what the receiver takes (about 85% on average, a cut every ~6 s). Why 7%, not
10%: a receiver that limits answers its 429 with ``Retry-After``, and each congestion
event then costs the whole endpoint that pause, so fewer, longer probes deliver more
(``bench.flow --only gateway``, 429 above 100/s with ``Retry-After: 1``, delivered/s after
10 s: 10% gave 59.9-73.2, median 69.8, in six runs; 7% gave 74.4-76.0 in four, with the
same ~0.2% of 429s); a cut then takes ~6 s to grow back instead of ~4 s. A
fixed ``rate_limit`` is the ceiling. 60 s without a signal and the adaptive rate no longer
applies (the endpoint is unthrottled).

The first cut (no fixed limit, no adaptive rate in force) starts from the rate this
process saw answered in its last second, but never below ``SENT_FLOOR`` (a quarter) of
the requests it started in that time: a burst's answers come back in any order, and
counting answers alone, a 429 seen after a few successes once cut the rate to 1/s;
starting from every request sent, a burst of 500 to a receiver taking 40 needed seven cuts
(seven seconds of mostly 429s). That is one process's share of the endpoint's traffic,
and the others' is unknown here, so the first cut is often too deep (with two workers
against a receiver taking 100/s: 20-78/s, depending on when the first 429 came back).
After it the rate grows by ``SLOW_START`` (1.5x) a second, as TCP's slow start, up to 10x
the cut rate (``outbox._db.queries.flow.SLOW_START_MAX``), until the next cut, which is
made from the rate in force and restarts the linear growth: a first cut at 20/s is back
near 100/s in four seconds, where 7% a second took about a minute (47/s on average over
seconds 10-40 of the run; ``bench.flow --only gateway``; migrations/0027_flow_slow_start.sql). 1.5x,
not TCP's doubling: with the signal a second late, the second that overshoots sends
about 1.5x what the receiver took. Unlike TCP's window, the rate grows with time, used
or not: hence the bound.

Which answers count: a 429 always; 503s and timeouts once they are at least half of
this process's answers from the endpoint over about two seconds (:func:`is_throttle`).
A signal is sent at most every ``SIGNAL_SECONDS`` per endpoint and process, except a longer
``Retry-After`` pause than the one already sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from outbox.delivery.outcome import AttemptResult

DECREASE = 0.7
INCREASE = 0.07
SLOW_START = 1.5  # growth per second after a first cut, until the next
SIGNAL_SECONDS = 0.5
PUSH_PAUSE_SECONDS = 5.0  # pauses this long also push the rows (idle workers then sleep)
THROTTLE_STATUSES = frozenset({429, 503})
MIN_OVERLOAD = 5  # 503s/timeouts in the window before they count as overload
SENT_FLOOR = 0.25  # the first cut's rate is at least this share of the requests started


@dataclass(slots=True)
class _Seen:
    second: int = 0
    count: int = 0  # answers this second
    bad: int = 0  # 503s and timeouts this second
    sent: int = 0  # requests started this second
    last_count: int = 0
    last_bad: int = 0
    last_sent: int = 0
    signalled_at: float = -1e9
    paused_until: float = 0.0

    def roll(self, second: int) -> None:
        """Move to ``second``: this second's counts become the last second's (zero if
        ``second`` does not follow it)."""
        if second == self.second:
            return
        recent = second == self.second + 1
        self.last_count, self.last_bad, self.last_sent = \
            (self.count, self.bad, self.sent) if recent else (0, 0, 0)
        self.second, self.count, self.bad, self.sent = second, 0, 0, 0


@dataclass(frozen=True, slots=True)
class Signal:
    """What to tell the database: cut the rate (from ``observed`` req/s if it has no
    adaptive rate yet) and pause for ``pause`` seconds (0: no pause)."""

    endpoint_id: UUID
    observed: float
    pause: float
    admitted_at: float = 0.0  # time.time() when the claim that took the request began


def is_throttle(result: AttemptResult) -> bool:
    """A 429, a 503 or a timeout: the receiver may be overloaded or limiting us. A 429 (or
    a 503 with Retry-After) always slows the endpoint down; other 503s and timeouts do
    when they are at least half of this process's answers from it in the current and the
    previous second, and at least MIN_OVERLOAD of them: an endpoint that fails one request
    in five is flaky, not overloaded, and its failures are retried (and counted by the
    circuit breaker), not throttled."""
    return result.status_code in THROTTLE_STATUSES or result.error_class == "timeout"


class Throttle:
    """Per-process rate observation and signal debouncing."""

    def __init__(self, *, pause_max: float, clock: Callable[[], float] = time.monotonic):
        self._pause_max = pause_max
        self._clock = clock
        self._seen: dict[UUID, _Seen] = {}

    def _at(self, endpoint: UUID, now: float) -> _Seen:
        seen = self._seen.get(endpoint)
        if seen is None:
            seen = self._seen[endpoint] = _Seen(second=int(now))
        seen.roll(int(now))
        return seen

    def sent(self, endpoint: UUID) -> None:
        """Count one request started to ``endpoint`` (the rate a signal reports)."""
        self._at(endpoint, self._clock()).sent += 1

    def observe(self, endpoint: UUID, result: AttemptResult,
                admitted_at: float = 0.0) -> Signal | None:
        """Count one attempt (admitted by a claim that began at ``admitted_at``,
        ``time.time()``); the signal to send if it was a throttling answer. The rate it
        reports is the answers this process saw in its last second, or ``SENT_FLOOR`` of
        the requests it started in that time if more: the answers of a burst come back in
        any order, so the first 429 seen may follow only a few successes while hundreds of
        requests are on their way."""
        now = self._clock()
        seen = self._at(endpoint, now)
        seen.count += 1
        if not is_throttle(result):
            return None
        after = result.retry_after_seconds
        pause = 0.0
        if after is not None and after > 0 and result.status_code in THROTTLE_STATUSES:
            pause = min(after, self._pause_max)  # (NaN fails "> 0")
        if result.status_code != 429 and not pause:  # overload only if most answers are
            seen.bad += 1
            bad, count = seen.bad + seen.last_bad, seen.count + seen.last_count
            if bad < MIN_OVERLOAD or 2 * bad < count:
                return None
        longer_pause = pause > 0 and now + pause > seen.paused_until + 0.05
        if now - seen.signalled_at < SIGNAL_SECONDS and not longer_pause:
            return None
        seen.signalled_at = now
        if pause:
            seen.paused_until = max(seen.paused_until, now + pause)
        sent = SENT_FLOOR * max(seen.last_sent, seen.sent)
        rate = max(sent, seen.last_count, seen.count, 1)
        return Signal(endpoint, float(rate), pause, admitted_at)
