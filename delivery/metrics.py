"""Prometheus metrics of one worker process (its own registry, served by outbox.delivery.health).

Under ``outbox worker --processes N`` (:mod:`outbox.delivery.supervisor`) each child runs
with ``PROMETHEUS_MULTIPROC_DIR`` set and the supervisor serves the group's sum: counters and
histograms add up over every child, exited ones included; ``outbox_in_flight`` is the sum
of the live children; the backlog gauges, which every child reads from the same database,
are the most recent live child's value (``livemostrecent``), not N times the backlog.

Label cardinality is bounded: ``endpoint`` is the endpoint id (never the URL), and after
``max_endpoints`` distinct ids every further endpoint is counted as ``other``.

    outbox_deliveries_total{outcome,endpoint}    counter: delivered, retry, dead, gone,
                                                 exhausted, fenced
    outbox_attempt_duration_seconds{endpoint}    histogram of HTTP attempt durations
    outbox_delivery_lag_seconds                  histogram: emit -> delivered
    outbox_due_backlog                           gauge: pending deliveries due now
    outbox_oldest_due_age_seconds                gauge: how long the oldest due one waited
    outbox_largest_tenant_due_backlog            gauge: due deliveries of the tenant with
                                                 the most (among the oldest 10,000 due;
                                                 no tenant label: unbounded cardinality)
    outbox_blocked_keys                          gauge: ordered keys held by a dead head
    outbox_blocked_deliveries                    gauge: deliveries queued behind them
    outbox_in_flight                             gauge: requests in flight here
    outbox_claimed_per_poll                      histogram of rows per claim
    outbox_database_errors_total                 counter of failed database calls
    outbox_endpoint_throttled_total{endpoint}    counter: throttling answers acted on (429,
                                                 503, timeouts: a rate cut or a pause)
    outbox_endpoint_allowed_rate{endpoint}       gauge: the endpoint's allowed requests per
                                                 second across all workers (flow-controlled
                                                 endpoints only; from the database)
    outbox_handbacks_total                       counter of claimed deliveries handed back
                                                 unsent (a breaker that opened between
                                                 claim and start; 0 in steady state)
    outbox_poisoned_total                        counter of deliveries dead-lettered
                                                 because their result could not be
                                                 written or their job not run (poison)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from outbox.delivery.jobs import Completion, Job

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
                    1800, 3600, 6 * 3600, 24 * 3600)
_OTHER: Final = "other"  # the endpoint label past the cardinality cap


class Metrics:
    """The worker's instruments; safe to call from the event loop thread."""

    def __init__(self, registry: CollectorRegistry | None = None, max_endpoints: int = 200):
        self.registry = registry or CollectorRegistry()
        self._max_endpoints = max_endpoints
        self._endpoints: set[str] = set()
        # (outcome, endpoint id) -> its labelled children: labels() per call is a lock
        # and a few dict lookups; endpoints past the cap share (outcome, _OTHER)'s, so
        # the cache holds at most outcomes x (max_endpoints + 1) entries. Not cached, the
        # endpoints past the cap cost 8% of the worker's CPU with 1,000 endpoints (py-spy,
        # bench.flow slow).
        self._children: dict[tuple[str, object], tuple[Counter, Histogram]] = {}
        self._lock = threading.Lock()
        self._rate_labels: set[str] = set()
        r = self.registry
        self.deliveries = Counter("outbox_deliveries", "Delivery attempts by outcome",
                                  ["outcome", "endpoint"], registry=r)
        self.attempt_duration = Histogram("outbox_attempt_duration_seconds",
                                          "HTTP attempt duration", ["endpoint"], registry=r)
        self.lag = Histogram("outbox_delivery_lag_seconds", "Emit to delivered",
                             buckets=_LATENCY_BUCKETS, registry=r)
        # the whole queue's state, the same in every process: the latest reading
        shared: Final = "livemostrecent"
        self.due_backlog = Gauge("outbox_due_backlog", "Pending deliveries due now",
                                 registry=r, multiprocess_mode=shared)
        self.oldest_due_age = Gauge("outbox_oldest_due_age_seconds",
                                    "Age of the oldest due delivery", registry=r,
                                    multiprocess_mode=shared)
        self.largest_tenant_backlog = Gauge(
            "outbox_largest_tenant_due_backlog",
            "Due deliveries of the tenant with the most, among the oldest 10,000 due",
            registry=r, multiprocess_mode=shared)
        self.blocked_keys = Gauge(
            "outbox_blocked_keys", "Ordered keys whose head is dead (replay or skip it)",
            registry=r, multiprocess_mode=shared)
        self.blocked_deliveries = Gauge(
            "outbox_blocked_deliveries", "Deliveries queued behind a dead head",
            registry=r, multiprocess_mode=shared)
        self.in_flight = Gauge("outbox_in_flight", "Requests in flight", registry=r,
                               multiprocess_mode="livesum")
        self.claimed_per_poll = Histogram("outbox_claimed_per_poll", "Rows per claim",
                                          buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500),
                                          registry=r)
        self.database_errors = Counter("outbox_database_errors", "Failed database calls",
                                       registry=r)
        self.endpoint_throttled = Counter(
            "outbox_endpoint_throttled", "Throttling answers acted on (429, 503, timeout)",
            ["endpoint"], registry=r)
        self.endpoint_allowed_rate = Gauge(
            "outbox_endpoint_allowed_rate",
            "Allowed requests per second to a flow-controlled endpoint, across all workers",
            ["endpoint"], registry=r, multiprocess_mode=shared)
        self.handbacks = Counter("outbox_handbacks", "Claimed deliveries handed back unsent",
                                 registry=r)
        self.poisoned = Counter("outbox_poisoned",
                                "Deliveries dead-lettered: result not recordable (poison)",
                                registry=r)

    def endpoint(self, endpoint_id: object) -> str:
        """The label for an endpoint id, or ``other`` past the cardinality cap."""
        label = str(endpoint_id)
        with self._lock:
            if label in self._endpoints:
                return label
            if len(self._endpoints) >= self._max_endpoints:
                return _OTHER
            self._endpoints.add(label)
            return label

    def attempted(self, job: Job, done: Completion) -> None:
        """Record one finished attempt (before it is written; fencing is counted apart)."""
        if done.outcome == "parked":
            return
        children = self._children.get((done.outcome, job.endpoint_id))
        if children is None:
            label = self.endpoint(job.endpoint_id)
            key = (done.outcome, job.endpoint_id if label != _OTHER else _OTHER)
            children = self._children.get(key)
            if children is None:
                children = self._children[key] = (
                    self.deliveries.labels(done.outcome, label),
                    self.attempt_duration.labels(label))
        children[0].inc()
        children[1].observe(done.duration_ms / 1000.0)
        if done.state == "delivered":
            lag = dt.datetime.now(dt.UTC) - job.emitted_at
            self.lag.observe(max(lag.total_seconds(), 0.0))

    def allowed_rates(self, rates: Sequence[tuple[object, float]]) -> None:
        """The flow-controlled endpoints' allowed rates now (-1: paused); the gauges of
        endpoints no longer listed are removed (unlimited again)."""
        now = {self.endpoint(e): rate for e, rate in rates}
        for labels in list(self._rate_labels - now.keys()):
            with contextlib.suppress(KeyError):
                self.endpoint_allowed_rate.remove(labels)
        for label, rate in now.items():
            self.endpoint_allowed_rate.labels(label).set(rate)
        self._rate_labels = set(now)

    def throttled(self, endpoint_id: object) -> None:
        self.endpoint_throttled.labels(self.endpoint(endpoint_id)).inc()

    def fenced(self, count: int) -> None:
        if count:
            self.deliveries.labels("fenced", "all").inc(count)
