"""Which answers slow an endpoint down, and how often a process says so."""

from __future__ import annotations

import uuid

from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.throttle import SENT_FLOOR, SIGNAL_SECONDS, Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def answer(status: int | None = 200, *, retry_after: float | None = None,
           error_class: str | None = None) -> AttemptResult:
    verdict = Verdict.DELIVERED if status == 200 else Verdict.RETRY
    return AttemptResult(verdict, status, 1.0, error_class, None, None, retry_after)


def test_a_429_signals_once_per_interval_with_the_rate_seen() -> None:
    clock = Clock()
    throttle = Throttle(pause_max=60.0, clock=clock)
    e = uuid.uuid4()
    for _ in range(30):
        assert throttle.observe(e, answer()) is None
    signal = throttle.observe(e, answer(429))
    assert signal is not None and signal.observed == 31 and signal.pause == 0
    assert throttle.observe(e, answer(429), 5.0) is None  # debounced
    assert throttle.observe(e, answer(429)) is None  # debounced
    clock.now += SIGNAL_SECONDS + 0.01
    assert throttle.observe(e, answer(429)) is not None


def test_retry_after_pauses_clamped_and_a_longer_one_is_not_debounced() -> None:
    clock = Clock()
    throttle = Throttle(pause_max=10.0, clock=clock)
    e = uuid.uuid4()
    first = throttle.observe(e, answer(429, retry_after=2.0))
    assert first is not None and first.pause == 2.0
    longer = throttle.observe(e, answer(503, retry_after=3600.0))
    assert longer is not None and longer.pause == 10.0  # clamped
    clock.now += SIGNAL_SECONDS + 0.01
    nan = throttle.observe(e, answer(429, retry_after=float("nan")))
    assert nan is not None and nan.pause == 0


def test_a_flaky_endpoint_is_not_throttled_an_overloaded_one_is() -> None:
    """One 503 in five is retried, not throttled; mostly 503s or timeouts are overload."""
    clock = Clock()
    throttle = Throttle(pause_max=60.0, clock=clock)
    flaky, overloaded = uuid.uuid4(), uuid.uuid4()
    for i in range(200):
        clock.now += 0.01
        assert throttle.observe(flaky, answer(503 if i % 5 == 0 else 200)) is None
    signals = [throttle.observe(overloaded, answer(None, error_class="timeout") if i % 3
                                else answer(200)) for i in range(12)]
    assert any(s is not None for s in signals)


def test_the_rate_reported_is_at_least_a_share_of_what_was_sent() -> None:
    """A burst of 250 requests whose first 429 comes back after 3 successes reports a
    quarter of 250 requests a second, not 4 (which would cut the endpoint's rate to its
    floor) nor all 250 (seven cuts to reach a receiver taking 40); across a second's
    boundary the last second's sends still count; answers seen count when more."""
    clock = Clock()
    throttle = Throttle(pause_max=60.0, clock=clock)
    e, other = uuid.uuid4(), uuid.uuid4()
    clock.now = 1000.9
    for _ in range(250):
        throttle.sent(e)
    throttle.sent(other)
    clock.now = 1001.05  # the answers arrive in the next second
    for _ in range(3):
        assert throttle.observe(e, answer()) is None
    signal = throttle.observe(e, answer(429))
    assert signal is not None and signal.observed == 250 * SENT_FLOOR
    other_signal = throttle.observe(other, answer(429))
    assert other_signal is not None and other_signal.observed == 1  # its own sends only
    clock.now = 1003.5  # two seconds later: the burst no longer counts
    throttle.sent(e)
    late = throttle.observe(e, answer(429))
    assert late is not None and late.observed == 1
