"""Every JSON route on a real database, through the same library functions as the CLI."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi import FastAPI
from fastapi.testclient import TestClient

import outbox
from outbox.admin import deadletter as dl
from outbox.admin.portal import WebSettings
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.cli import delivery_ids, execute, invoke
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET
from tests.web.conftest import World, enter_portal, new_client, snapshot
from tests.web.routes import all_routes
from tests.web.test_catalog_web import CATALOG_COVERED
from tests.web.test_signature_keys_web import KEYS_COVERED

# Every route this file exercises; test_every_api_route_is_exercised keeps it complete.
COVERED = {
    ("GET", "/api/endpoints"), ("POST", "/api/endpoints"), ("GET", "/api/endpoints/{endpoint_id}"),
    ("PATCH", "/api/endpoints/{endpoint_id}"), ("POST", "/api/endpoints/{endpoint_id}/enable"),
    ("POST", "/api/endpoints/{endpoint_id}/disable"),
    ("POST", "/api/endpoints/{endpoint_id}/rotate-secret"),
    ("POST", "/api/endpoints/{endpoint_id}/ping"), ("GET", "/api/events"),
    # test-filter: tests/web/test_filters_api.py
    ("POST", "/api/endpoints/{endpoint_id}/test-filter"),
    ("POST", "/api/portal/endpoints/{endpoint_id}/test-filter"),
    ("GET", "/api/events/{event_id}"), ("GET", "/api/dead"), ("POST", "/api/dead/replay"),
    ("POST", "/api/dead/skip"), ("POST", "/api/portal/skip"), ("POST", "/api/portal-links"),
    ("GET", "/api/stats"), ("GET", "/api/portal/endpoints"), ("POST", "/api/portal/endpoints"),
    ("GET", "/api/portal/endpoints/{endpoint_id}"),
    ("PATCH", "/api/portal/endpoints/{endpoint_id}"),
    ("POST", "/api/portal/endpoints/{endpoint_id}/disable"),
    ("POST", "/api/portal/endpoints/{endpoint_id}/enable"),
    ("POST", "/api/portal/endpoints/{endpoint_id}/rotate-secret"),
    ("GET", "/api/portal/events"), ("GET", "/api/portal/events/{event_id}"),
    ("GET", "/api/portal/dead"), ("POST", "/api/portal/replay"),
    ("GET", "/api/openapi.json"), ("GET", "/api/docs"), ("GET", "/healthz"), ("GET", "/readyz"),
}


def test_every_api_route_is_exercised(app: FastAPI) -> None:
    api = {(m, p) for m, p in all_routes(app)
           if p.startswith("/api") or p in ("/healthz", "/readyz")}
    assert api == COVERED | CATALOG_COVERED | KEYS_COVERED


def test_endpoint_lifecycle(db_url: str, api: TestClient) -> None:
    created = api.post("/api/endpoints", json={
        "url": "http://127.0.0.1:9/hook", "tenant": "acme", "event_types": ["invoice.*"],
        "headers": {"X-Team": "billing"}, "description": "billing", "max_attempts": 5})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["secret"].startswith("whsec_") and body["warnings"] == []
    assert created.headers["cache-control"] == "no-store"
    eid = body["endpoint"]["id"]
    assert body["endpoint"]["tenant"] == "acme" and body["endpoint"]["max_attempts"] == 5
    given = api.post("/api/endpoints", json={"url": "http://127.0.0.1:9/b", "secret": SECRET})
    assert given.json()["secret"] is None  # the caller's own secret is not echoed
    assert [e["id"] for e in api.get("/api/endpoints", params={"tenant": "acme"})
            .json()["endpoints"]] == [eid]
    assert api.get(f"/api/endpoints/{eid}").json()["endpoint"]["url"] == "http://127.0.0.1:9/hook"
    patched = api.patch(f"/api/endpoints/{eid}", json={"url": "http://127.0.0.1:9/v2",
                                                        "all_event_types": True})
    assert patched.status_code == 200, patched.text
    assert patched.json()["endpoint"]["event_types"] is None
    disabled = api.post(f"/api/endpoints/{eid}/disable", json={"reason": "maintenance"})
    assert disabled.json()["endpoint"]["disabled_reason"] == "maintenance"
    assert [e["id"] for e in api.get("/api/endpoints", params={"enabled": "false"})
            .json()["endpoints"]] == [eid]
    assert api.post(f"/api/endpoints/{eid}/enable").json()["endpoint"]["enabled"] is True
    rotated = api.post(f"/api/endpoints/{eid}/rotate-secret", json={"grace": "1h"})
    assert rotated.status_code == 200 and rotated.json()["secret"].startswith("whsec_")
    assert rotated.json()["secret"] != body["secret"]
    again = api.post(f"/api/endpoints/{eid}/rotate-secret")
    assert again.status_code == 409 and again.json()["error"]["code"] == "operation_refused"
    cli = invoke(db_url, "endpoints", "list", "--tenant", "acme", "--json")
    assert eid in cli.stdout  # one code path: the CLI sees what the API made


def test_endpoint_list_pages_by_cursor(api: TestClient, world: World) -> None:
    for i in range(4):
        api.post("/api/endpoints", json={"url": f"http://127.0.0.1:9/p{i}", "tenant": "acme"})
    seen: list[str] = []
    after: str | None = None
    while True:
        page = api.get("/api/endpoints", params={"limit": 2, **({"after": after} if after
                                                               else {})}).json()
        seen += [e["id"] for e in page["endpoints"]]
        after = page["next_after"]
        if after is None:
            break
    assert len(seen) == len(set(seen)) == 7 and seen == sorted(seen)
    acme = api.get("/api/endpoints", params={"tenant": "acme", "enabled": "true"}).json()
    assert len(acme["endpoints"]) == 5 and acme["next_after"] is None


def test_ping_goes_through_the_worker_sender(db_url: str, api: TestClient) -> None:
    with Receiver(secret=SECRET, default=Behaviour(body=b"pong")) as rx:
        eid = api.post("/api/endpoints", json={"url": rx.url + "/hook", "secret": SECRET}
                       ).json()["endpoint"]["id"]
        before = snapshot(db_url)
        answer = api.post(f"/api/endpoints/{eid}/ping")
        assert answer.status_code == 200, answer.text
        ping = answer.json()["ping"]
        assert ping["ok"] is True and ping["status"] == 200 and ping["response"] == "pong"
        assert snapshot(db_url) == before
    refused = api.post("/api/endpoints", json={"url": "http://127.0.0.1:9/x", "secret": SECRET})
    down = api.post(f"/api/endpoints/{refused.json()['endpoint']['id']}/ping").json()["ping"]
    assert down["ok"] is False and down["error"]


def test_events_list_pages_by_cursor_and_filters(db_url: str, api: TestClient,
                                                 world: World) -> None:
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [outbox.Event("user.created", {"n": i}) for i in range(5)])
        c.commit()
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 3, **({"before": cursor} if cursor else {})}
        page = api.get("/api/events", params=params).json()
        seen += [e["id"] for e in page["events"]]
        cursor = page["next_before"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 13
    assert seen == sorted(seen, reverse=True)  # newest first, no gap, no repeat
    typed = api.get("/api/events", params={"type": "user.created"}).json()["events"]
    assert len(typed) == 5 and {e["tenant"] for e in typed} == {None}
    acme = api.get("/api/events", params={"tenant": "acme"}).json()["events"]
    assert {e["id"] for e in acme} == {str(i) for i in world.a.events}
    assert sum(e["dead"] for e in acme) == 4 and sum(e["pending"] for e in acme) == 4
    assert api.get("/api/events", params={"since": "1h"}).json()["events"]
    assert api.get("/api/events", params={"until": "1h"}).json()["events"] == []


def test_event_detail_has_every_attempt(api: TestClient, world: World) -> None:
    event = api.get(f"/api/events/{world.a.events[0]}").json()["event"]
    assert event["tenant"] == "acme" and '"who":"acme"' in event["payload"].replace(" ", "")
    assert len(event["deliveries"]) == 2  # its endpoint and the all-tenants one
    for delivery in event["deliveries"]:
        assert delivery["state"] == "dead"
        assert [a["attempt"] for a in delivery["log"]] == [1, 2, 3]
        assert {"status_code", "duration_ms", "error", "response_excerpt"} <= set(
            delivery["log"][0])


def test_dead_list_with_selectors(db_url: str, api: TestClient, world: World) -> None:
    every = api.get("/api/dead").json()["dead"]
    assert len(every) == 8
    acme = api.get("/api/dead", params={"tenant": "acme"}).json()["dead"]
    assert {d["id"] for d in acme} == set(world.a.dead + world.a.shared_dead)
    with psycopg.connect(db_url) as c:  # split per endpoint: the library's rows and order
        whole = dl.list_dead(c, schema=SCHEMA, selection=dl.Selection(tenant="acme"),
                             limit=3).rows
    assert [d["id"] for d in api.get("/api/dead", params={"tenant": "acme", "limit": 3})
            .json()["dead"]] == [d.id for d in whole]
    one = api.get("/api/dead", params={"endpoint": str(world.a.endpoint)}).json()["dead"]
    assert {d["id"] for d in one} == set(world.a.dead)
    assert api.get("/api/dead", params={"event_type": "nope"}).json()["dead"] == []
    assert len(api.get("/api/dead", params={"limit": 3}).json()["dead"]) == 3
    assert api.get("/api/dead", params={"since": "1m"}).json()["dead"] == []


def test_replay_is_a_dry_run_until_confirmed(db_url: str, api: TestClient,
                                             world: World) -> None:
    before = snapshot(db_url)
    dry = api.post("/api/dead/replay", json={"endpoint": str(world.a.endpoint)})
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    assert dry.json()["total"] == 2
    assert snapshot(db_url) == before
    done = api.post("/api/dead/replay", json={"endpoint": str(world.a.endpoint),
                                               "confirm": True})
    assert done.json()["result"]["replayed"] == 2
    assert delivery_ids(db_url, "state = 'pending' AND id = ANY (%s)", (world.a.dead,)
                        ) == sorted(world.a.dead)


def test_replay_onto_a_disabled_endpoint_is_refused_unless_enabled(
        db_url: str, api: TestClient, world: World) -> None:
    api.post(f"/api/endpoints/{world.b.endpoint}/disable")
    before = snapshot(db_url)
    plan = api.post("/api/dead/replay", json={"ids": world.b.dead}).json()
    assert plan["refusal"] and str(world.b.endpoint) in plan["refusal"]
    refused = api.post("/api/dead/replay", json={"ids": world.b.dead, "confirm": True})
    assert refused.status_code == 409 and snapshot(db_url) == before
    done = api.post("/api/dead/replay", json={"ids": world.b.dead, "confirm": True,
                                               "enable_endpoints": True})
    assert done.json()["result"]["replayed"] == 2


def test_skip(db_url: str, app: FastAPI, api: TestClient, web_settings: WebSettings,
              world: World) -> None:
    """A dead delivery that holds no ordering key is reported unchanged; refusals change
    nothing (the ordered path itself is tested with ``outbox dead skip``)."""
    done = api.post("/api/dead/skip", json={"ids": world.a.dead[:1]})
    assert done.status_code == 200, done.text
    assert done.json() == {"skipped": [], "unchanged": world.a.dead[:1]}
    before = snapshot(db_url)
    pending = delivery_ids(db_url, "state = 'pending'")[:1]
    assert api.post("/api/dead/skip", json={"ids": pending}).status_code == 409
    assert api.post("/api/dead/skip", json={"ids": [987654]}).status_code == 404
    assert api.post("/api/dead/skip", json={"ids": world.b.dead, "tenant": "acme"}
                    ).status_code == 404
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        foreign = client.post("/api/portal/skip", headers={"X-CSRF-Token": csrf},
                              json={"ids": world.b.dead})
        assert foreign.status_code == 404
        own = client.post("/api/portal/skip", headers={"X-CSRF-Token": csrf},
                          json={"ids": world.a.dead})
        assert own.json()["unchanged"] == world.a.dead
    assert snapshot(db_url) == before


def test_stats(api: TestClient, world: World) -> None:
    stats = api.get("/api/stats").json()
    assert stats["due"]["due"] == 8
    rows = {e["endpoint_id"]: e for e in stats["endpoints"]}
    own = rows[str(world.a.endpoint)]
    assert own["dead_1h"] == 2 and own["success_rate_1h"] == 0.0 and own["breaker"] == "closed"
    assert {t["tenant"] for t in stats["tenants"]} == {"acme", "globex"}
    api.post(f"/api/endpoints/{world.a.endpoint}/disable")
    scoped = api.get("/api/stats", params={"tenant": "acme"}).json()
    assert {e["endpoint_id"] for e in scoped["endpoints"]} == {str(world.a.endpoint),
                                                               str(world.everyone)}
    assert {e["breaker"] for e in scoped["endpoints"]
            if e["endpoint_id"] == str(world.a.endpoint)} == {"disabled"}


def test_health_and_docs(db_url: str, anon: TestClient) -> None:
    assert anon.get("/healthz").json() == {"status": "ok"}
    assert anon.get("/readyz").json() == {"status": "ready"}
    spec = anon.get("/api/openapi.json").json()
    assert "/api/endpoints" in spec["paths"] and "/api/portal/replay" in spec["paths"]
    docs = anon.get("/api/docs")
    assert "/api/dead/replay" in docs.text and "<script" not in docs.text
    execute(db_url, f"DELETE FROM {SCHEMA}.schema_migrations WHERE version = 1")
    assert anon.get("/readyz").status_code == 503


def test_portal_manages_its_own_endpoints(db_url: str, app: FastAPI,
                                          web_settings: WebSettings, world: World) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        h = {"X-CSRF-Token": csrf}
        listed = client.get("/api/portal/endpoints").json()
        assert [e["id"] for e in listed["endpoints"]] == [str(world.a.endpoint)]
        made = client.post("/api/portal/endpoints", headers=h,
                           json={"url": "http://127.0.0.1:9/acme-2", "event_types": ["a.b"]})
        assert made.status_code == 201 and made.json()["secret"].startswith("whsec_")
        assert made.json()["endpoint"]["tenant"] == "acme"
        eid = made.json()["endpoint"]["id"]
        refused = client.post("/api/portal/endpoints", headers=h,
                              json={"url": "http://127.0.0.1:9/x", "all_tenants": True})
        assert refused.status_code == 422  # no field to reach other tenants
        assert client.get(f"/api/portal/endpoints/{eid}").status_code == 200
        edited = client.patch(f"/api/portal/endpoints/{eid}", headers=h,
                              json={"description": "mine"})
        assert edited.json()["endpoint"]["description"] == "mine"
        assert client.post(f"/api/portal/endpoints/{eid}/disable", headers=h
                           ).json()["endpoint"]["enabled"] is False
        assert client.post(f"/api/portal/endpoints/{eid}/enable", headers=h
                           ).json()["endpoint"]["enabled"] is True
        rotated = client.post(f"/api/portal/endpoints/{eid}/rotate-secret", headers=h)
        assert rotated.json()["secret"].startswith("whsec_")


def test_portal_delivery_log_and_replay(db_url: str, app: FastAPI,
                                        web_settings: WebSettings, world: World) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        h = {"X-CSRF-Token": csrf}
        events = client.get("/api/portal/events").json()["events"]
        assert {e["id"] for e in events} == {str(i) for i in world.a.events}
        assert sum(e["dead"] for e in events) == 2  # its own endpoint's, not the shared one's
        detail = client.get(f"/api/portal/events/{world.a.events[0]}").json()["event"]
        assert [d["endpoint_id"] for d in detail["deliveries"]] == [str(world.a.endpoint)]
        dead = client.get("/api/portal/dead").json()["dead"]
        assert {d["id"] for d in dead} == set(world.a.dead)
        before = snapshot(db_url)
        plan = client.post("/api/portal/replay", headers=h, json={"all": True}).json()
        assert plan["dry_run"] and plan["total"] == 2 and snapshot(db_url) == before
        one = client.post("/api/portal/replay", headers=h,
                          json={"ids": world.a.dead[:1], "confirm": True}).json()
        assert one["result"]["replayed"] == 1
        rest = client.post("/api/portal/replay", headers=h,
                           json={"all": True, "confirm": True}).json()
        assert rest["result"]["replayed"] == 1
        assert delivery_ids(db_url, "state = 'dead' AND id = ANY (%s)",
                            (world.a.shared_dead,)) == sorted(world.a.shared_dead)


def test_portal_links_from_the_api(api: TestClient, anon: TestClient) -> None:
    # never from the Host header: base_url, or OUTBOX_PUBLIC_URL (tests/web/test_sessions.py)
    refused = api.post("/api/portal-links", json={"tenant": "acme", "expires": "5m"})
    assert refused.status_code == 422 and "base_url" in refused.json()["error"]["message"]
    made = api.post("/api/portal-links", json={"tenant": "acme", "expires": "5m",
                                               "base_url": "https://testserver"})
    assert made.status_code == 201 and made.json()["tenant"] == "acme"
    url = made.json()["url"]
    assert url.startswith("https://testserver/portal/enter?token=")
    assert anon.get(url).status_code == 303
    assert anon.get("/api/portal/endpoints").json()["tenant"] == "acme"
    other = api.post("/api/portal-links", json={"tenant": "acme",
                                                "base_url": "https://hooks.example.com"})
    assert other.json()["url"].startswith("https://hooks.example.com/portal/enter?token=")


def test_an_app_can_mount_it(db_url: str, web_settings: WebSettings, world: World) -> None:
    from fastapi import FastAPI as Parent

    from outbox.web import create_app

    parent = Parent()
    parent.mount("/outbox", create_app(web_settings))
    with new_client(parent) as client:
        assert client.get("/outbox/healthz").status_code == 200
        answer = client.get("/outbox/api/endpoints",
                            headers={"Authorization": "Bearer " + web_settings.admin_token
                                     .get_secret_value()})
        assert answer.status_code == 200 and len(answer.json()["endpoints"]) == 3
        assert client.get("/outbox/api/endpoints").status_code == 401


