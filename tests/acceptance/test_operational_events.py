"""Operational events through a real worker and receiver: the sender reports dead
deliveries, failing, recovered and disabled endpoints through its own outbox, signed like
any event, to endpoints that subscribe to them, and never about its own operational events."""

from __future__ import annotations

import collections
import uuid
from typing import Any

import psycopg

import outbox
from outbox.admin import endpoints as ep
from outbox.admin.deadletter import Selection
from outbox.admin.replay import replay
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, rows, run_until, settings

OPS = ["outbox.*"]


def _emit(db_url: str, n: int = 1, event_type: str = "order.created",
          tenant: str | None = None) -> list[uuid.UUID]:
    with psycopg.connect(db_url) as c:
        ids = outbox.emit_many(c, [outbox.Event(event_type, {"n": i}, tenant=tenant)
                                   for i in range(n)])
        c.commit()
    return ids


def _op_events(db_url: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Every operational event written: (type, tenant, payload), oldest first."""
    return [(t, tenant, payload) for t, tenant, payload in rows(
        db_url, "SELECT type, tenant, payload FROM outbox.events"
                " WHERE type LIKE 'outbox.%%' ORDER BY id")]


def _settled(db_url: str) -> bool:
    """Nothing left to deliver (no pending delivery, parked ones of a disabled endpoint
    aside)."""
    return not rows(db_url, "SELECT 1 FROM outbox.deliveries WHERE state = 'pending'"
                            " AND visible_at < 'infinity' LIMIT 1")


def _ops_received(rx: Receiver, path: str = "/ops") -> list[dict[str, Any]]:
    return [r.json() for r in rx.received if r.path == path]


def test_exhausted_500s_reach_the_operational_endpoint_as_delivery_dead(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/bad", [Behaviour(status=500)])
        bad = add_endpoint(db_url, rx.url + "/bad")
        ops = add_endpoint(db_url, rx.url + "/ops", event_types=OPS)
        catch_all = add_endpoint(db_url, rx.url + "/all")  # every type: not operational ones
        (event_id,) = _emit(db_url)
        cfg = settings(db_url, max_attempts=3)
        run_until(cfg, lambda: len(_ops_received(rx)) >= 1)
        ((delivery_id,),) = rows(db_url, "SELECT id FROM outbox.deliveries"
                                         " WHERE endpoint_id = %s", (bad,))
        (got,) = [r for r in rx.received if r.path == "/ops"]
    assert got.signature_ok is True
    body = got.json()
    assert body["type"] == "outbox.delivery.dead" and body["timestamp"].endswith("Z")
    assert body["data"] == {
        "delivery_id": delivery_id, "event_id": str(event_id), "event_type": "order.created",
        "endpoint_id": str(bad), "tenant": None, "attempts": 3, "outcome": "exhausted",
        "last_status": 500, "last_error": "attempts exhausted (3/3): HTTP 500",
        "error_class": "http_status"}
    ((op_id, op_type),) = rows(db_url, "SELECT id, type FROM outbox.events"
                                       " WHERE type LIKE 'outbox.%%'")
    assert got.webhook_id == str(op_id) and op_type == "outbox.delivery.dead"
    assert uuid.UUID(got.webhook_id).version == 7
    assert not [r for r in rx.received if r.path == "/all" and r.webhook_id == str(op_id)]
    assert ops and catch_all


def test_a_410_disables_the_endpoint_and_says_so(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/gone", [Behaviour(status=410)])
        gone = add_endpoint(db_url, rx.url + "/gone", tenant="acme")
        add_endpoint(db_url, rx.url + "/ops", event_types=["outbox.endpoint.*"],
                     tenant="acme")
        _emit(db_url, tenant="acme")
        run_until(settings(db_url), lambda: len(_ops_received(rx)) >= 1 and _settled(db_url))
        received = _ops_received(rx)
    assert [b["type"] for b in received] == ["outbox.endpoint.disabled"]
    assert received[0]["data"] == {"endpoint_id": str(gone), "tenant": "acme",
                                   "by": "receiver", "reason": "receiver answered 410 Gone"}
    assert rows(db_url, "SELECT enabled FROM outbox.endpoints WHERE id = %s", (gone,)) == [
        (False,)]


def test_failing_then_recovered_once_each(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/flaky", [Behaviour(status=503)] * 3 + [Behaviour(status=200)])
        flaky = add_endpoint(db_url, rx.url + "/flaky")
        add_endpoint(db_url, rx.url + "/ops", event_types=OPS)
        _emit(db_url)
        cfg = settings(db_url, failing_threshold=3, max_attempts=10)
        run_until(cfg, lambda: len(_ops_received(rx)) >= 2 and _settled(db_url))
        received = _ops_received(rx)
    assert [b["type"] for b in received] == ["outbox.endpoint.failing",
                                             "outbox.endpoint.recovered"]
    failing, recovered = (b["data"] for b in received)
    assert failing == {"endpoint_id": str(flaky), "tenant": None, "consecutive_failures": 3,
                       "threshold": 3, "last_status": 503, "last_error": "HTTP 503"}
    assert recovered["endpoint_id"] == str(flaky) and recovered["failing_since"]
    assert rows(db_url, "SELECT failure_streak, failing_since FROM outbox.endpoints"
                        " WHERE id = %s", (flaky,)) == [(0, None)]


def test_a_failing_operational_endpoint_causes_no_further_operational_events(
        db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/bad", [Behaviour(status=500)])
        rx.script("/ops", [Behaviour(status=500)])
        add_endpoint(db_url, rx.url + "/bad")
        ops = add_endpoint(db_url, rx.url + "/ops", event_types=OPS)
        _emit(db_url)
        cfg = settings(db_url, max_attempts=3, failing_threshold=2)
        run_until(cfg, lambda: _settled(db_url))
        ops_attempts = len(_ops_received(rx))
    # /bad: 3 attempts, then dead (its streak reached 2: failing) -> two operational events;
    # their deliveries to /ops fail until exhausted and cause nothing more.
    assert sorted(t for t, _, _ in _op_events(db_url)) == ["outbox.delivery.dead",
                                                            "outbox.endpoint.failing"]
    assert ops_attempts == 6
    assert rows(db_url, "SELECT state, count(*) FROM outbox.deliveries WHERE endpoint_id = %s"
                        " GROUP BY 1", (ops,)) == [("dead", 2)]
    assert rows(db_url, "SELECT failure_streak, failing_since FROM outbox.endpoints"
                        " WHERE id = %s", (ops,)) == [(0, None)]


def test_a_dead_letter_storm_makes_one_failing_and_one_dead_per_delivery(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/bad", [Behaviour(status=500)])
        add_endpoint(db_url, rx.url + "/bad", max_attempts=1)
        add_endpoint(db_url, rx.url + "/ops", event_types=OPS)
        _emit(db_url, 400)
        cfg = settings(db_url, breaker_threshold=1000)  # no pauses: every delivery dies now
        run_until(cfg, lambda: _settled(db_url))
        received = _ops_received(rx)
    counts = collections.Counter(t for t, _, _ in _op_events(db_url))
    assert counts == {"outbox.delivery.dead": 400, "outbox.endpoint.failing": 1}
    assert collections.Counter(b["type"] for b in received) == counts


def test_operator_and_tenant_changes_are_reported_once(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x", tenant="acme")
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.set_enabled(c, endpoint, False, schema=SCHEMA, reason="maintenance")
        ep.set_enabled(c, endpoint, False, schema=SCHEMA)  # already disabled: nothing
        ep.set_enabled(c, endpoint, True, schema=SCHEMA, actor="tenant")
        ep.set_enabled(c, endpoint, True, schema=SCHEMA)  # already enabled: nothing
    events = _op_events(db_url)
    assert [(t, tenant, p["data"]) for t, tenant, p in events] == [
        ("outbox.endpoint.disabled", "acme", {"endpoint_id": str(endpoint), "tenant": "acme",
                                              "by": "operator", "reason": "maintenance"}),
        ("outbox.endpoint.enabled", "acme", {"endpoint_id": str(endpoint), "tenant": "acme",
                                             "by": "tenant"}),
    ]


def test_a_dead_ordered_head_reports_the_key_it_blocks(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        rx.script("/ordered", [Behaviour(status=400)])
        ordered = add_endpoint(db_url, rx.url + "/ordered", ordered=True, tenant="acme")
        add_endpoint(db_url, rx.url + "/ops", event_types=["outbox.key.blocked"],
                     tenant="acme")
        with psycopg.connect(db_url) as c:
            ids = outbox.emit_many(c, [outbox.Event("order.updated", {"v": v}, key="order-7",
                                                    tenant="acme") for v in range(3)])
            c.commit()
        run_until(settings(db_url), lambda: len(_ops_received(rx)) >= 1 and _settled(db_url))
        ((head,),) = rows(db_url, "SELECT id FROM outbox.deliveries WHERE state = 'dead'")
        received = _ops_received(rx)
    assert [b["type"] for b in received] == ["outbox.key.blocked"]
    assert received[0]["data"] == {"endpoint_id": str(ordered), "tenant": "acme",
                                   "key": "order-7", "delivery_id": head,
                                   "event_id": str(ids[0]), "queued": 2}


def _every_type(db_url: str) -> dict[str, dict[str, Any]]:
    """One real payload of every operational type, as a receiver gets it."""
    with Receiver(secret=SECRET) as rx:
        rx.script("/bad", [Behaviour(status=500)])
        rx.script("/flaky", [Behaviour(status=503)] * 2 + [Behaviour(status=200)])
        rx.script("/gone", [Behaviour(status=410)])
        rx.script("/ordered", [Behaviour(status=400)])
        add_endpoint(db_url, rx.url + "/ops", event_types=OPS, all_tenants=True)
        add_endpoint(db_url, rx.url + "/bad", tenant="acme", event_types=["order.*"])
        add_endpoint(db_url, rx.url + "/flaky", tenant="acme", event_types=["invoice.*"])
        gone = add_endpoint(db_url, rx.url + "/gone", tenant="acme", event_types=["user.*"])
        add_endpoint(db_url, rx.url + "/ordered", tenant="acme", ordered=True,
                     event_types=["cart.*"])
        for event_type in ("order.created", "invoice.paid", "user.deleted"):
            _emit(db_url, tenant="acme", event_type=event_type)
        with psycopg.connect(db_url) as c:
            outbox.emit_many(c, [outbox.Event("cart.updated", {"v": v}, key="cart-42",
                                              tenant="acme") for v in range(3)])
            c.commit()
        cfg = settings(db_url, max_attempts=3, failing_threshold=2)
        run_until(cfg, lambda: _settled(db_url))
        with psycopg.connect(db_url, autocommit=True) as c:
            ep.set_enabled(c, gone, True, schema=SCHEMA, actor="tenant")
        run_until(cfg, lambda: _settled(db_url) and any(
            b["type"] == "outbox.endpoint.enabled" for b in _ops_received(rx)))
        with psycopg.connect(db_url, autocommit=True) as c:
            replay(c, schema=SCHEMA, selection=Selection(event_type="order.created",
                                                         tenant="acme"),
                   actor="ops@example.com")
        run_until(cfg, lambda: _settled(db_url) and any(
            b["type"] == "outbox.replay.finished" for b in _ops_received(rx)))
        return {b["type"]: b for b in _ops_received(rx)}


def _shape(value: Any) -> Any:
    """The JSON type of a value; of an object, its keys' shapes (null matches any type)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return type(value).__name__


def test_the_guide_shows_every_type_as_the_code_emits_it(db_url: str) -> None:
    import json

    from outbox.admin.opevents import TYPES
    from tests.support.docs import snippet

    emitted = _every_type(db_url)
    assert set(emitted) == set(TYPES)
    for op_type in TYPES:
        example = json.loads(snippet("guides/operational-events.md", op_type, "json"))
        got = emitted[op_type]
        assert example["type"] == op_type and set(example) == {"type", "timestamp", "data"}
        assert set(example["data"]) == set(got["data"]), op_type
        for key, value in got["data"].items():
            shown = example["data"][key]
            if value is not None and shown is not None:
                assert _shape(shown) == _shape(value), f"{op_type} data.{key}"


def test_the_guide_subscription_snippet_runs(db_url: str) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.docs import snippet

    script = snippet("guides/operational-events.md", "subscribe", "sh")
    bindir = Path(sys.executable).parent
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA,
           "PATH": f"{bindir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert rows(db_url, "SELECT tenant, all_tenants, event_types FROM outbox.endpoints"
                        " ORDER BY created_at") == [
        (None, True, ["outbox.*"]),
        ("acme", False, ["outbox.delivery.dead", "outbox.endpoint.*"])]


def test_worker_processes_racing_count_one_streak_and_report_one_failing(
        db_url: str) -> None:
    """Three worker processes record failures of one endpoint concurrently: every failed
    attempt is counted once (no lost update of the streak) and the endpoint goes failing
    once (one outbox.endpoint.failing), however their completions interleave."""
    from tests.acceptance.test_worker_processes import workers
    from tests.support.workers import wait_until

    with Receiver(secret=SECRET) as rx:
        rx.script("/bad", [Behaviour(status=500)])
        bad = add_endpoint(db_url, rx.url + "/bad", max_attempts=2, max_in_flight=100)
        add_endpoint(db_url, rx.url + "/ops", event_types=["outbox.endpoint.*"])
        _emit(db_url, 600)
        with workers(db_url, 3, OUTBOX_CONCURRENCY="50", OUTBOX_BREAKER_THRESHOLD="100000",
                     OUTBOX_FAILING_THRESHOLD="5", OUTBOX_BATCH_SIZE="20"):
            wait_until(lambda: _settled(db_url), 120, "every delivery dead")
            wait_until(lambda: len(_ops_received(rx)) >= 1, 30, "the failing event")
    counts = collections.Counter(t for t, _, _ in _op_events(db_url))
    assert counts == {"outbox.delivery.dead": 600, "outbox.endpoint.failing": 1}
    assert rows(db_url, "SELECT failure_streak FROM outbox.endpoints WHERE id = %s",
                (bad,)) == [(1200,)]
    assert rows(db_url, "SELECT count(*) FROM outbox.delivery_attempts a"
                        " JOIN outbox.deliveries d ON d.id = a.delivery_id"
                        " WHERE d.endpoint_id = %s AND a.outcome <> 'fenced'", (bad,)) == [
        (1200,)]


def test_the_readme_table_shows_every_type_with_the_guides_data() -> None:
    """The README's table: one row per operational type, its example ``data`` with the keys
    of the guide's example (which the test above checks against a real worker's)."""
    import json
    import re
    from pathlib import Path

    from outbox.admin.opevents import TYPES
    from tests.support.docs import snippet

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| `(outbox\.[a-z.]+)` \| [^|]+ \| `(\{.*\})` \|$", readme, re.M)
    assert [t for t, _ in rows] == list(TYPES)
    for op_type, data in rows:
        guide = json.loads(snippet("guides/operational-events.md", op_type, "json"))["data"]
        assert list(json.loads(data)) == list(guide), op_type
