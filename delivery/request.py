"""The HTTP request for one delivery: body bytes and signed headers."""

from __future__ import annotations

from outbox.delivery.jobs import Job
from outbox.signing import webhook_headers


def build_headers(job: Job, body: bytes, *, user_agent: str, timestamp: int) -> dict[str, str]:
    """Standard Webhooks headers, signed by the current secret and, during a rotation's
    grace period, the previous one too; ``Idempotency-Key`` equals ``webhook-id``.
    The endpoint's custom headers come first and cannot override these. ``traceparent``
    carries the emitting span's trace context when there was one (outbox.tracing)."""
    secrets = [job.secret] + ([job.previous_secret] if job.previous_secret else [])
    headers = dict(job.headers)
    headers.update(webhook_headers(secrets, job.webhook_id, body, timestamp=timestamp))
    headers["idempotency-key"] = job.webhook_id
    headers["content-type"] = "application/json"
    headers["user-agent"] = user_agent
    if job.traceparent:
        headers["traceparent"] = job.traceparent
    return headers
