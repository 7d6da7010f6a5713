"""Worker settings (pydantic-settings, ``OUTBOX_*`` environment variables).

Default retry schedule: full-jitter exponential backoff, base 60 s, cap 8 h, 15 attempts.
The 14 waits have windows 1, 2, 4, ... 256 min, then 8 h five times: at most 48.5 h in
all, 24.3 h expected (full jitter halves the window on average) -- about a day.
"""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field, field_validator, model_validator

from outbox.settings import Settings


def _default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class WorkerSettings(Settings):
    """What ``outbox worker`` needs on top of :class:`outbox.settings.Settings`."""

    lease_seconds: float = Field(default=60.0, gt=0, le=3600)
    http_timeout_seconds: float = Field(default=15.0, gt=0, le=600)
    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=600)
    retry_base_seconds: float = Field(default=60.0, gt=0)
    retry_cap_seconds: float = Field(default=8 * 3600.0, gt=0)
    retry_after_max_seconds: float = Field(default=3600.0, ge=0)
    max_attempts: int = Field(default=15, ge=1, le=100)
    # Idle poll. None: 5 s with OUTBOX_WAKEUP=notify (only a fallback there: idle workers
    # are woken by NOTIFY and at the next pending row's due time), 0.05 s with poll.
    poll_interval_seconds: float | None = Field(default=None, gt=0, le=60)
    # Requests in flight per process. 1000: real receivers answer in 100-500 ms, so a
    # process needs hundreds in flight to send a few thousand a second (bench.flow
    # "slow": 1,000 endpoints at 250 ms, 2 processes on 2 cores, 2026-11-26: 370/s per
    # process at 100, 1,553/s at 500, 2,175/s at 1000; peak RSS 79-87 MB). An idle slot
    # costs nothing; the per-endpoint cap below keeps one endpoint to a quarter of them.
    concurrency: int = Field(default=1000, ge=1, le=10_000)
    batch_size: int = Field(default=100, ge=1, le=10_000)
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    response_body_cap: int = Field(default=16 * 1024, ge=0)
    allow_networks: str = ""
    user_agent: str = "outbox-webhooks/0.1"
    # Per-process cap on requests in flight to one endpoint; 0: a quarter of concurrency.
    endpoint_max_in_flight: int = Field(default=0, ge=0)
    breaker_threshold: int = Field(default=10, ge=1)
    breaker_cooldown_seconds: float = Field(default=30.0, gt=0)
    # Consecutive failed attempts that make an endpoint failing (outbox.endpoint.failing).
    failing_threshold: int = Field(default=10, ge=1)
    # Retention: the worker prunes finished deliveries (and attempt logs, orphaned events)
    # older than this, every prune_interval_seconds; 0 disables it.
    retention_seconds: float = Field(default=7 * 86400.0, ge=0)
    prune_interval_seconds: float = Field(default=600.0, gt=0)
    prune_batch_size: int = Field(default=1000, ge=1)
    # Dead deliveries are kept this long for replay (they block their partition's drop
    # until then); 0: kept until replayed, skipped or pruned with `outbox prune --dead-too`.
    dead_retention_seconds: float = Field(default=14 * 86400.0, ge=0)
    # The width of one partition of the delivery history (migrations/0018): the worker
    # opens the next one every this many seconds and drops the expired ones. 0: a third of
    # retention_seconds (at least an hour), so about five partitions are kept.
    partition_seconds: float = Field(default=0.0, ge=0)
    metrics_port: int = Field(default=9464, ge=0, le=65535)  # 0: no metrics/health server
    metrics_host: str = "0.0.0.0"
    log_format: Literal["json", "text"] = "json"
    backlog_interval_seconds: float = Field(default=5.0, gt=0)
    # /readyz answers 503 while a database call has been running longer than this (a
    # commit waiting for a missing synchronous standby, a lock, a hung network path).
    database_stall_seconds: float = Field(default=10.0, gt=0)
    worker_id: str = Field(default_factory=_default_worker_id)

    @field_validator("partition_seconds")
    @classmethod
    def _check_partition_width(cls, value: float) -> float:
        if 0 < value < 10:
            raise ValueError("must be 0 (a third of the retention) or at least 10 seconds")
        return value

    @field_validator("allow_networks")
    @classmethod
    def _check_networks(cls, value: str) -> str:
        from outbox._security.ssrf import parse_networks

        parse_networks(value)  # ValueError names the bad item
        return value

    @model_validator(mode="after")
    def _timeout_below_lease(self) -> WorkerSettings:
        if self.http_timeout_seconds >= self.lease_seconds:
            raise ValueError(
                f"OUTBOX_HTTP_TIMEOUT_SECONDS ({self.http_timeout_seconds:g}) must be below "
                f"OUTBOX_LEASE_SECONDS ({self.lease_seconds:g}): a request still running when "
                "its lease expires would be delivered twice"
            )
        if self.retry_base_seconds > self.retry_cap_seconds:
            raise ValueError("OUTBOX_RETRY_BASE_SECONDS must not exceed OUTBOX_RETRY_CAP_SECONDS")
        return self

    @property
    def poll_seconds(self) -> float:
        """The idle poll interval in effect (see ``poll_interval_seconds``)."""
        if self.poll_interval_seconds is not None:
            return self.poll_interval_seconds
        return 5.0 if self.wakeup == "notify" else 0.05

    @property
    def default_endpoint_cap(self) -> int:
        return self.endpoint_max_in_flight or max(1, self.concurrency // 4)

    def endpoint_timeout(self, requested: float | None) -> float:
        """An endpoint's HTTP timeout, kept below the lease whatever the endpoint asks."""
        timeout = requested or self.http_timeout_seconds
        return min(timeout, self.lease_seconds * 0.9)
