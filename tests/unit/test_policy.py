"""Worker settings validation and the next-state policy (pure)."""

from __future__ import annotations

import datetime as dt
import math
import uuid

import pytest
from pydantic import ValidationError

from outbox.delivery.jobs import Job
from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.policy import decide, park
from outbox.delivery.settings import WorkerSettings


def _job(attempt: int, **kw: object) -> Job:
    base: dict[str, object] = {
        "delivery_id": 7, "attempt": attempt, "token": uuid.uuid4(), "event_id": uuid.uuid4(),
        "event_type": "x", "payload": "{}", "emitted_at": dt.datetime.now(dt.UTC),
        "endpoint_id": uuid.uuid4(), "url": "https://example.com", "enabled": True,
        "secret": "whsec_x", "previous_secret": None, "headers": {}, "max_attempts": None,
        "retry_base_seconds": None, "retry_cap_seconds": None, "timeout_seconds": None,
    }
    base.update(kw)
    return Job(**base)  # type: ignore[arg-type]


def _result(verdict: Verdict, status: int | None = 503, retry_after: float | None = None
            ) -> AttemptResult:
    return AttemptResult(verdict, status, 12.0, None if verdict is Verdict.DELIVERED else "x",
                         f"HTTP {status}", None, retry_after)


CFG = WorkerSettings(retry_base_seconds=10, retry_cap_seconds=100, max_attempts=5)


@pytest.mark.parametrize(
    ("verdict", "attempt", "state", "outcome"),
    [
        (Verdict.DELIVERED, 1, "delivered", "delivered"),
        (Verdict.DEAD, 1, "dead", "dead"),
        (Verdict.GONE, 2, "dead", "gone"),
        (Verdict.RETRY, 4, "pending", "retry"),
        (Verdict.RETRY, 5, "dead", "exhausted"),
    ],
)
def test_next_state(verdict: Verdict, attempt: int, state: str, outcome: str) -> None:
    done = decide(_job(attempt), _result(verdict), CFG)
    assert (done.state, done.outcome) == (state, outcome)
    assert (done.gone_endpoint is not None) == (verdict is Verdict.GONE)


def test_exhausted_keeps_last_error() -> None:
    done = decide(_job(5), _result(Verdict.RETRY, 502), CFG)
    assert done.error == "attempts exhausted (5/5): HTTP 502"


def test_endpoint_overrides_apply() -> None:
    job = _job(3, max_attempts=3)
    assert decide(job, _result(Verdict.RETRY), CFG).state == "dead"
    job = _job(3, retry_base_seconds=0.001, retry_cap_seconds=0.002)
    assert decide(job, _result(Verdict.RETRY), CFG).delay <= 0.002


def test_retry_delay_within_window_and_retry_after_clamped() -> None:
    delays = [decide(_job(3), _result(Verdict.RETRY), CFG).delay for _ in range(200)]
    assert max(delays) <= 40 and min(delays) >= 0
    cfg = WorkerSettings(retry_base_seconds=1, retry_cap_seconds=2, retry_after_max_seconds=30)
    assert decide(_job(1), _result(Verdict.RETRY, 429, 10_000), cfg).delay == 30


def test_park_refunds_the_attempt() -> None:
    done = park(_job(2))
    assert (done.state, done.refund, done.delay) == ("pending", 1, math.inf)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"http_timeout_seconds": 60, "lease_seconds": 60}, "must be below"),
        ({"retry_base_seconds": 100, "retry_cap_seconds": 10}, "must not exceed"),
        ({"allow_networks": "10.0.0.1/8"}, "OUTBOX_ALLOW_NETWORKS"),
        ({"concurrency": 0}, "greater than or equal to 1"),
    ],
)
def test_worker_settings_refused(env: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        WorkerSettings(**env)  # type: ignore[arg-type]


def test_endpoint_timeout_stays_below_lease() -> None:
    cfg = WorkerSettings(lease_seconds=10, http_timeout_seconds=5)
    assert cfg.endpoint_timeout(None) == 5
    assert cfg.endpoint_timeout(100) == 9
