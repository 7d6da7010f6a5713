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


def test_held_jobs_are_bounded_and_go_stale() -> None:
    import datetime as dt

    from outbox.delivery.fairness import HeldJobs
    from outbox.delivery.jobs import Job
    from outbox.delivery.settings import WorkerSettings

    clock = Clock()
    cfg = WorkerSettings(endpoint_max_in_flight=2, lease_seconds=30, http_timeout_seconds=10)
    held = HeldJobs(cfg, clock=clock)
    endpoint = uuid.uuid4()

    def job(n: int) -> Job:
        return Job(n, 1, uuid.uuid4(), uuid.uuid4(), "x", "{}", dt.datetime.now(dt.UTC),
                   endpoint, "https://example.com", True, "whsec_x", None, {}, None, None,
                   None, None)

    assert held.hold(job(1)) and held.hold(job(2))
    assert not held.hold(job(3))  # at most cap waiting per endpoint
    assert len(held) == 2
    assert [(j.delivery_id, fresh) for j, fresh in held.take(endpoint, everything=False)] == [
        (1, True)]
    clock.now += 19.5  # 30 s lease - 10 s timeout - 1 s margin = 19 s of safe holding
    assert [(j.delivery_id, fresh) for j, fresh in held.take(endpoint, everything=False)] == [
        (2, False)]
    assert len(held) == 0 and held.endpoints() == []
