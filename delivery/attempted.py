"""An attempt's completion as the worker records it: decided by
:mod:`outbox.delivery.policy`, counted in the metrics and logged, then written by the
worker's batched completion (nothing here touches the database).

Guarantees: a job that cannot even be attempted (an unexpected error building or
classifying its request, e.g. stored headers that are not a mapping) gets a dead-letter
completion carrying that error (:func:`poisoned_completion`): it is never left to its
lease, to fail again. A success is logged at DEBUG only (one line per success costs ~7% of
a worker's CPU: bench/), every other outcome at INFO.
"""

from __future__ import annotations

import logging

from outbox.delivery.jobs import Completion, Job
from outbox.delivery.metrics import Metrics
from outbox.delivery.outcome import AttemptResult
from outbox.delivery.policy import decide, poisoned
from outbox.delivery.settings import WorkerSettings

__all__ = ["completed", "poisoned_completion"]

log = logging.getLogger("outbox.worker")


def poisoned_completion(job: Job, exc: Exception, metrics: Metrics) -> Completion:
    """The dead-letter completion of a job that could not be attempted, logged (with
    ``exc``) and counted in ``outbox_poisoned_total``."""
    log.error("delivery %d dead-lettered: it could not be attempted", job.delivery_id,
              exc_info=exc, extra={"delivery_id": job.delivery_id,
                                   "endpoint_id": str(job.endpoint_id)})
    metrics.poisoned.inc()
    return poisoned(job, exc)


def completed(job: Job, result: AttemptResult, settings: WorkerSettings,
              metrics: Metrics) -> Completion:
    """The completion of one attempt, counted and logged (not yet recorded)."""
    done = decide(job, result, settings)
    metrics.attempted(job, done)
    level = logging.DEBUG if done.state == "delivered" else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "delivery %s", done.outcome, extra={
            "event_id": job.webhook_id, "delivery_id": job.delivery_id,
            "endpoint_id": str(job.endpoint_id), "attempt": job.attempt,
            "outcome": done.outcome, "status": done.status,
            "duration_ms": round(done.duration_ms, 1), "error": done.error})
    return done
