"""EndpointGate: caps, breaker opening, half-open probing, closing."""

from __future__ import annotations

import uuid

from outbox.delivery.fairness import EndpointGate


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_cap_per_endpoint_is_independent() -> None:
    gate = EndpointGate(default_cap=2, threshold=3, cooldown=30, clock=Clock())
    a, b = uuid.uuid4(), uuid.uuid4()
    assert gate.admit(a) is None and gate.admit(a) is None
    deferred = gate.admit(a)
    assert deferred is not None and 0.5 <= deferred <= 1.0
    assert gate.admit(b) is None  # b is unaffected by a
    gate.release(a, failed=False)
    assert gate.admit(a) is None
    assert gate.admit(b, cap=1) is not None  # an endpoint's own cap wins


def test_breaker_opens_probes_and_closes() -> None:
    clock = Clock()
    gate = EndpointGate(default_cap=10, threshold=3, cooldown=30, clock=clock)
    e = uuid.uuid4()
    opened = []
    for _ in range(3):
        assert gate.admit(e) is None
        opened.append(gate.release(e, failed=True))
    assert opened == [None, None, 30]
    assert gate.is_open(e)
    assert gate.admit(e) == 30  # handed back until the cooldown ends
    clock.now += 31
    assert gate.admit(e) is None  # the probe
    assert gate.admit(e) is not None  # only one probe at a time
    assert gate.release(e, failed=True) == 30  # failed probe re-opens
    clock.now += 31
    assert gate.admit(e) is None
    assert gate.release(e, failed=False) is None  # a good probe closes it
    assert not gate.is_open(e)
    assert all(gate.admit(e) is None for _ in range(10))


def test_success_resets_the_failure_count() -> None:
    gate = EndpointGate(default_cap=10, threshold=3, cooldown=30, clock=Clock())
    e = uuid.uuid4()
    for failed in (True, True, False, True, True):
        gate.admit(e)
        assert gate.release(e, failed=failed) is None
    assert not gate.is_open(e)


def test_claim_budgets_report_in_flight_and_block_open_breakers() -> None:
    """The claim is told what is in flight here per endpoint; an open breaker (or a
    half-open one with its probe out) leaves its endpoint no slot; a half-open one with no
    probe out is not listed (its first row becomes the probe)."""
    from outbox.delivery.fairness import BLOCKED

    clock = Clock()
    gate = EndpointGate(default_cap=4, threshold=1, cooldown=10.0, clock=clock)
    busy, broken, idle = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert gate.admit(busy) is None and gate.admit(busy) is None
    assert gate.admit(broken) is None and gate.release(broken, failed=True) == 10.0
    assert gate.admit(idle) is None
    gate.release(idle, failed=False)
    assert dict(zip(*gate.claim_budgets(), strict=True)) == {busy: 2, broken: BLOCKED}
    clock.now += 11  # half-open, no probe out: not listed
    assert dict(zip(*gate.claim_budgets(), strict=True)) == {busy: 2}
    assert gate.admit(broken) is None  # the probe
    assert dict(zip(*gate.claim_budgets(), strict=True)) == {busy: 2, broken: BLOCKED}


def test_failures_of_requests_started_before_a_success_do_not_count() -> None:
    """A burst of requests that time out together, all started before a request that has
    since succeeded, is old news: the endpoint answered the later one. They neither open
    the breaker nor reset the count; failures of requests started after that success do
    open it."""
    clock = Clock()
    gate = EndpointGate(default_cap=100, threshold=3, cooldown=30, clock=clock)
    e = uuid.uuid4()
    early = gate.now()
    for _ in range(12):
        assert gate.admit(e) is None
    clock.now += 1
    gate.admit(e)
    assert gate.release(e, failed=False, started=gate.now()) is None
    clock.now += 15  # the early ones time out, after the later one's answer
    assert [gate.release(e, failed=True, started=early) for _ in range(10)] == [None] * 10
    assert not gate.is_open(e)
    assert gate.release(e, failed=True, started=gate.now()) is None  # started later: counts
    assert gate.release(e, failed=True, started=early) is None  # old news: no reset either
    assert gate.release(e, failed=True, started=gate.now()) is None
    assert gate.release(e, failed=True, started=gate.now()) == 30
    assert gate.is_open(e)


def test_a_success_without_a_request_does_not_order_the_failures() -> None:
    """A job that never reached the endpoint (refused before sending, or one that could
    not be sent) says nothing of it: it neither makes earlier-started failures old news,
    nor resets the count, nor closes a half-open breaker."""
    clock = Clock()
    gate = EndpointGate(default_cap=100, threshold=2, cooldown=30, clock=clock)
    e = uuid.uuid4()
    early = gate.now()
    clock.now += 1
    for _ in range(3):
        assert gate.admit(e) is None
    assert gate.release(e, failed=True, started=early) is None
    assert gate.release(e, failed=False, reached=False) is None  # no reset either
    assert gate.release(e, failed=True, started=early) == 30  # both counted
    clock.now += 31
    assert gate.admit(e) is None  # the probe: a job that never reaches the endpoint
    assert gate.release(e, failed=False, reached=False) is None
    assert gate.admit(e) is None  # still half-open: the next job is the probe


def test_claim_budgets_list_only_the_endpoints_a_claim_of_that_size_could_fill() -> None:
    """With the claim's size, an endpoint whose free slots (its latest job's cap, else the
    default, minus what is in flight) are at least that size is left out: the claim can
    take no more than its size of it anyway. Open breakers are always listed."""
    from outbox.delivery.fairness import BLOCKED

    gate = EndpointGate(default_cap=10, threshold=1, cooldown=10.0, clock=Clock())
    roomy, nearly_full, own_cap, broken = (uuid.uuid4() for _ in range(4))
    for _ in range(3):
        assert gate.admit(roomy) is None  # 7 free
    for _ in range(8):
        assert gate.admit(nearly_full) is None  # 2 free
    for _ in range(3):
        assert gate.admit(own_cap, 5) is None  # its own cap 5: 2 free
    assert gate.admit(broken) is None and gate.release(broken, failed=True) == 10.0
    listed = dict(zip(*gate.claim_budgets(5), strict=True))
    assert listed == {nearly_full: 8, own_cap: 3, broken: BLOCKED}
    assert dict(zip(*gate.claim_budgets(8), strict=True)) == {
        roomy: 3, nearly_full: 8, own_cap: 3, broken: BLOCKED}
    assert len(gate.claim_budgets()[0]) == 4  # no size: every endpoint in flight
