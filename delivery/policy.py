"""From an attempt's result to the delivery's next state (pure: no I/O).

    DELIVERED                      -> delivered
    DEAD (4xx, 3xx)                -> dead at once
    GONE (410)                     -> dead, and the endpoint is disabled
    RETRY, attempts left           -> pending, visible again after the jittered backoff
    RETRY, attempts exhausted      -> dead, with the last error
"""

from __future__ import annotations

import math

from outbox.delivery.jobs import Completion, Job
from outbox.delivery.outcome import AttemptResult, Verdict, retry_delay
from outbox.delivery.settings import WorkerSettings


def decide(job: Job, result: AttemptResult, settings: WorkerSettings) -> Completion:
    """The completion to record for ``job`` after ``result``."""
    max_attempts = job.max_attempts or settings.max_attempts
    state, delay, error = "pending", 0.0, result.error
    outcome = str(result.verdict)
    if result.verdict is Verdict.DELIVERED:
        state = "delivered"
    elif result.verdict in (Verdict.DEAD, Verdict.GONE):
        state = "dead"
    elif job.attempt >= max_attempts:
        state, outcome = "dead", "exhausted"
        error = f"attempts exhausted ({job.attempt}/{max_attempts}): {result.error}"
    else:
        delay = retry_delay(
            job.attempt,
            base=job.retry_base_seconds or settings.retry_base_seconds,
            cap=job.retry_cap_seconds or settings.retry_cap_seconds,
            retry_after=result.retry_after_seconds,
            retry_after_max=settings.retry_after_max_seconds,
        )
    return Completion(
        delivery_id=job.delivery_id, token=job.token, state=state, delay=delay, refund=0,
        status=result.status_code, error=error, outcome=outcome, attempt=job.attempt,
        duration_ms=result.duration_ms, error_class=result.error_class,
        excerpt=result.response_excerpt,
        gone_endpoint=job.endpoint_id if result.verdict is Verdict.GONE else None,
    )


def defer(job: Job, delay: float) -> Completion:
    """Hand back a claimed delivery unsent (attempt refunded), visible again after ``delay``:
    its endpoint is at its in-flight cap or its circuit breaker is open."""
    return Completion(
        delivery_id=job.delivery_id, token=job.token, state="pending", delay=delay,
        refund=1, status=None, error=None, outcome="deferred", attempt=job.attempt,
        duration_ms=0.0, error_class=None, excerpt=None,
    )


def park(job: Job) -> Completion:
    """Hand back a claimed delivery of a disabled endpoint untouched, until re-enabled."""
    return Completion(
        delivery_id=job.delivery_id, token=job.token, state="pending", delay=math.inf,
        refund=1, status=None, error=None, outcome="parked", attempt=job.attempt,
        duration_ms=0.0, error_class=None, excerpt=None,
    )


def poisoned(job: Job, exc: BaseException) -> Completion:
    """Dead-letter a claimed delivery that could not be attempted at all, with the error."""
    return Completion(
        delivery_id=job.delivery_id, token=job.token, state="dead", delay=0.0, refund=0,
        status=None, error=f"could not be attempted: {type(exc).__name__}: {exc}"[:1000],
        outcome="poisoned", attempt=job.attempt, duration_ms=0.0, error_class="poisoned",
        excerpt=None,
    )
