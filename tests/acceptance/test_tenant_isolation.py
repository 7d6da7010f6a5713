"""Isolation, as a property: random tenants, endpoints and filters; 10,000 events through a
real worker and receiver. Every delivery's endpoint has the event's tenant (or opted in to
all), every matching endpoint got the event exactly once, and nothing else arrived."""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass

import psycopg
import pytest

import outbox
from outbox import Event
from outbox.testing.receiver import Receiver
from tests.support.workers import add_endpoint, drain, settings

pytestmark = pytest.mark.slow  # 10,000 events through a worker

TYPES = ["invoice.paid", "invoice.void", "invoice.line.added", "user.created",
         "user.deleted", "order.shipped"]
FILTERS: list[list[str] | None] = [
    None, ["invoice.*"], ["invoice.paid"], ["user.*", "order.shipped"], ["*"],
    ["invoice.line.*"], ["order.shipped"],
]
TENANTS: list[str | None] = [f"tenant-{i}" for i in range(20)] + [None]


def matches(filters: list[str] | None, event_type: str) -> bool:
    """The routing rule's type filter, written here independently of the SQL under test."""
    if filters is None or "*" in filters:
        return True
    return any(f == event_type or (f.endswith(".*") and event_type.startswith(f[:-1]))
               for f in filters)


@dataclass(frozen=True)
class Spec:
    path: str
    tenant: str | None
    all_tenants: bool
    filters: list[str] | None
    enabled: bool = True

    def takes(self, tenant: str | None, event_type: str) -> bool:
        in_scope = self.all_tenants or self.tenant == tenant
        return self.enabled and in_scope and matches(self.filters, event_type)


def _register(db_url: str, rx_url: str, rng: random.Random) -> list[Spec]:
    specs: list[Spec] = []
    for tenant in TENANTS:
        for _ in range(rng.randint(0, 3)):
            specs.append(Spec(f"/ep{len(specs)}", tenant, False, rng.choice(FILTERS)))
    specs.append(Spec(f"/ep{len(specs)}", None, True, ["invoice.*"]))  # a data warehouse
    specs.append(Spec(f"/ep{len(specs)}", "tenant-3", False, None, enabled=False))
    with psycopg.connect(db_url, autocommit=True) as c:
        for spec in specs:
            endpoint = add_endpoint(db_url, rx_url + spec.path, tenant=spec.tenant,
                                    all_tenants=spec.all_tenants, event_types=spec.filters)
            if not spec.enabled:
                outbox.admin.endpoints.set_enabled(c, endpoint, False, schema="outbox")
    return specs


def test_random_tenants_reach_exactly_their_endpoints(db_url: str) -> None:
    rng = random.Random(20261123)
    with Receiver() as rx:
        specs = _register(db_url, rx.url, rng)
        events = [Event(rng.choice(TYPES), {"i": i}, tenant=rng.choice(TENANTS))
                  for i in range(10_000)]
        with psycopg.connect(db_url) as c:
            ids = outbox.emit_many(c, events[:9_000])  # the COPY path
            ids += [outbox.emit(c, e) for e in events[9_000:]]  # one statement each
            c.commit()
        expected = collections.Counter(
            (str(event_id), spec.path) for event_id, event in zip(ids, events, strict=True)
            for spec in specs if spec.takes(event.tenant, event.type))
        assert len(expected) > 5_000, "the random setup routes a fair share of events"
        drain(settings(db_url, concurrency=64, endpoint_max_in_flight=64))
        got = collections.Counter((r.webhook_id, r.path) for r in rx.received)
    assert got == expected
