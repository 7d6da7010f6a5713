"""The flow-control metrics: allowed rate per flow-controlled endpoint (removed once it is
unlimited again), throttling answers per endpoint, hand-backs."""

from __future__ import annotations

import uuid

from prometheus_client import generate_latest

from outbox.delivery.metrics import Metrics


def test_allowed_rate_gauges_follow_the_database_and_throttles_count() -> None:
    m = Metrics()
    a, b = uuid.uuid4(), uuid.uuid4()
    m.allowed_rates([(a, 50.0), (b, -1.0)])
    text = generate_latest(m.registry).decode()
    assert f'outbox_endpoint_allowed_rate{{endpoint="{a}"}} 50.0' in text
    assert f'outbox_endpoint_allowed_rate{{endpoint="{b}"}} -1.0' in text  # paused
    m.allowed_rates([(a, 35.0)])  # b unlimited again: its series goes
    text = generate_latest(m.registry).decode()
    assert f'outbox_endpoint_allowed_rate{{endpoint="{a}"}} 35.0' in text
    assert str(b) not in text
    m.throttled(a)
    m.throttled(a)
    m.handbacks.inc()
    text = generate_latest(m.registry).decode()
    assert f'outbox_endpoint_throttled_total{{endpoint="{a}"}} 2.0' in text
    assert "outbox_handbacks_total 1.0" in text


def test_endpoints_past_the_cardinality_cap_are_counted_as_other() -> None:
    """The first ``max_endpoints`` endpoints get their own series; every later one adds to
    ``other`` (each attempt counted once, by outcome), however often it is seen."""
    import datetime as dt

    from outbox.delivery.jobs import Completion, Job

    m = Metrics(max_endpoints=2)
    ids = [uuid.uuid4() for _ in range(5)]
    now = dt.datetime.now(dt.UTC)
    for n, endpoint in enumerate(ids * 3):
        job = Job(n, 1, uuid.uuid4(), uuid.uuid4(), "t", "{}", now, endpoint, "http://x/",
                  True, "s", None, {}, None, None, None, None)
        outcome = "delivered" if n % 5 != 4 else "retry"
        m.attempted(job, Completion(n, job.token, "delivered" if outcome == "delivered"
                                    else "pending", 0.0, 0, 200, None, outcome, 1, 5.0,
                                    None, None))
    text = generate_latest(m.registry).decode()
    for own in ids[:2]:
        assert (f'outbox_deliveries_total{{endpoint="{own}",outcome="delivered"}} 3.0'
                in text)
    assert 'outbox_deliveries_total{endpoint="other",outcome="delivered"} 6.0' in text
    assert 'outbox_deliveries_total{endpoint="other",outcome="retry"} 3.0' in text
    assert 'outbox_attempt_duration_seconds_count{endpoint="other"} 9.0' in text
    assert not any(str(later) in text for later in ids[2:])
