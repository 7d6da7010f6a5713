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
