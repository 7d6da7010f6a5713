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
from outbox.testing.receiver import Behaviour, Receiver
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


OP_FILTERS = [["outbox.*"], ["outbox.delivery.dead"], ["outbox.endpoint.*"],
              ["outbox.delivery.*", "invoice.*"]]


def _settled(db_url: str) -> bool:
    with psycopg.connect(db_url) as c:
        return c.execute("SELECT NOT EXISTS (SELECT 1 FROM outbox.deliveries WHERE state ="
                         " 'pending' AND visible_at < 'infinity')").fetchone() == (True,)


def test_operational_events_reach_only_their_tenant(db_url: str) -> None:
    """Tenants' endpoints fail (500 until dead, a 410), operators and tenants disable some:
    every operational event reaches the endpoints of the failing endpoint's tenant that name
    its type, plus the all-tenants ones, exactly once; catch-all endpoints get none."""
    from tests.support.workers import run_until

    rng = random.Random(20261126)
    tenants: list[str | None] = [f"tenant-{i}" for i in range(6)] + [None]
    with Receiver() as rx:
        rx.script("/fail", [Behaviour(status=500)])
        rx.script("/gone", [Behaviour(status=410)])
        specs: list[Spec] = []
        owner: dict[str, str | None] = {}  # endpoint id -> tenant
        path_of: dict[str, str] = {}
        for tenant in tenants:
            name = tenant or "none"
            for path, filters in ((f"/fail/{name}", None), (f"/ops/{name}/a", rng.choice(
                    OP_FILTERS)), (f"/ops/{name}/b", rng.choice(OP_FILTERS)),
                                  (f"/all/{name}", None)):
                specs.append(Spec(path, tenant, False, filters))
                endpoint = str(add_endpoint(db_url, rx.url + path, tenant=tenant,
                                            event_types=filters, max_attempts=1))
                owner[endpoint], path_of[endpoint] = tenant, path
            if rng.random() < 0.5:
                owner[str(add_endpoint(db_url, rx.url + f"/gone/{name}", tenant=tenant,
                                       event_types=["invoice.*"]))] = tenant
        specs.append(Spec("/ops-warehouse", None, True, ["outbox.*"]))
        add_endpoint(db_url, rx.url + "/ops-warehouse", all_tenants=True,
                     event_types=["outbox.*"])
        with psycopg.connect(db_url) as c:
            outbox.emit_many(c, [Event(rng.choice(TYPES), {"i": i}, tenant=rng.choice(tenants))
                                 for i in range(300)])
            c.commit()
        with psycopg.connect(db_url, autocommit=True) as c:
            for endpoint_id in rng.sample(sorted(owner), 4):
                outbox.admin.endpoints.set_enabled(c, endpoint_id, False, schema="outbox",
                                                   actor=rng.choice(["operator", "tenant"]))
        run_until(settings(db_url, concurrency=32, breaker_threshold=1000), lambda: _settled(
            db_url), timeout=60)
        with psycopg.connect(db_url) as c:
            ops = {str(i): (t, tenant, p["data"]["endpoint_id"]) for i, t, tenant, p in
                   c.execute("SELECT id, type, tenant, payload FROM outbox.events"
                             " WHERE type LIKE 'outbox.%'").fetchall()}
            disabled = {str(i) for (i,) in c.execute(
                "SELECT id FROM outbox.endpoints WHERE NOT enabled").fetchall()}
        got = collections.Counter((r.webhook_id, r.path) for r in rx.received
                                  if r.webhook_id in ops)
    assert {t for t, _, _ in ops.values()} >= {"outbox.delivery.dead",
                                              "outbox.endpoint.disabled"}
    for _type, tenant, endpoint_id in ops.values():
        assert owner[endpoint_id] == tenant, "an operational event has its endpoint's tenant"
    off = {path_of[e] for e in disabled if e in path_of}  # disabled before the worker ran
    expected = collections.Counter(
        (op_id, spec.path) for op_id, (op_type, tenant, _) in ops.items() for spec in specs
        if spec.filters is not None and spec.takes(tenant, op_type) and spec.path not in off)
    assert got == expected
