"""A portal session of tenant acme cannot read or change anything of tenant globex through
any route of the app (API and pages), read from the app itself: a route added later is
attacked too. Each route gets globex's ids in its path, its query and its body (JSON and
form), with acme's valid CSRF token. Every row of every table of the schema must stay
byte-identical (acme's own included: the ids of acme's deliveries to the shared endpoint are
among those sent; the one allowed change is the add-endpoint page adding an endpoint of
acme's, its smuggled ``tenant`` ignored), and no answer
may name any of globex's endpoints, URLs or events (nor the shared endpoint) that the
request did not name itself (a 404 may echo the id it was asked for)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from fastapi import FastAPI
from fastapi.testclient import TestClient

import outbox
from outbox.admin.portal import WebSettings
from tests.support.cli import delivery_ids, execute, kill
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint
from tests.web.conftest import BASE, PRIVATE_TYPES, World, enter_portal, new_client
from tests.web.routes import all_routes, fill, is_portal

ACTIONS = ["disable", "enable", "rotate-secret", "ping", "replay", "edit", "x"]


def _database(db_url: str) -> dict[str, list[str]]:
    """Every row of every table of the outbox schema, as JSON text."""
    tables = [str(r[0]) for r in execute(db_url, """
        SELECT table_name FROM information_schema.tables
         WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY 1""", (SCHEMA,))]
    assert {"endpoints", "events", "deliveries", "delivery_attempts"} <= set(tables)
    return {t: sorted(str(r[0]) for r in execute(
        db_url, f'SELECT to_jsonb(x)::text FROM {SCHEMA}."{t}" x')) for t in tables}


def _changes(before: dict[str, list[str]], after: dict[str, list[str]]
             ) -> dict[str, tuple[set[str], set[str]]]:
    """Per changed table: (rows gone or changed, rows new or changed)."""
    return {t: (set(before.get(t, [])) - set(rows), set(rows) - set(before.get(t, [])))
            for t, rows in after.items() if before.get(t) != rows}


def _only_own_new_endpoints(changes: dict[str, tuple[set[str], set[str]]]) -> bool:
    """The one change an attack request may make: the page that adds an endpoint ignores
    a smuggled ``tenant`` / ``all_tenants`` field and adds one of the session's tenant
    (with its new flow-control row, migrations/0008_flow_control.sql, and nothing else
    there)."""
    if set(changes) - {"endpoints", "endpoint_flow"}:
        return False
    gone, new = changes.get("endpoints", (set(), set()))
    rows = [json.loads(r) for r in new]
    flow_gone, flow_new = changes.get("endpoint_flow", (set(), set()))
    new_ids = {r["id"] for r in rows}
    return (not gone and all(r["tenant"] == "acme" and not r["all_tenants"] for r in rows)
            and not flow_gone
            and all(json.loads(r)["endpoint_id"] in new_ids for r in flow_new))


def _attacks(world: World, csrf: str) -> list[dict[str, Any]]:
    """Request variants naming globex's objects (and acme's rows of the shared endpoint):
    each body alone (one selector, as a real request would send it), as JSON and as a form,
    then globex's ids in the query string, then nothing."""
    b = world.b
    ids = [*b.dead, *b.shared_dead, *world.a.shared_dead]
    bodies: list[dict[str, Any]] = [
        {"ids": ids, "confirm": True}, {"endpoint": str(b.endpoint), "confirm": True},
        {"all": True, "confirm": True, "tenant": "globex", "enable_endpoints": True},
        {"url": BASE + "stolen", "tenant": "globex"}, {"url": BASE + "stolen",
                                                        "all_tenants": True},
        {"endpoint_id": str(b.endpoint), "event_id": str(b.events[0]), "reason": "x"},
    ]
    out: list[dict[str, Any]] = [{"json": body} for body in bodies]
    out += [{"data": {**{k: v if k == "ids" else str(v) for k, v in body.items()},
                      "csrf_token": csrf}} for body in bodies]
    out.append({"params": {"tenant": "globex", "endpoint": str(b.endpoint),
                           "event_id": str(b.events[0]), "ids": ids}})
    return [*out, {}]


def _marks(world: World) -> list[str]:
    b = world.b
    return ["globex", str(b.endpoint), BASE + "globex", BASE + "all-tenants",
            str(world.everyone), *map(str, b.events), *PRIVATE_TYPES]


def test_a_portal_session_cannot_reach_another_tenant(
        db_url: str, app: FastAPI, web_settings: WebSettings, world: World) -> None:
    b = world.b
    values = {"endpoint_id": [str(b.endpoint), str(world.everyone)],
              "event_id": [str(e) for e in b.events[:2]],
              "delivery_id": [str(i) for i in (*b.dead, *b.shared_dead, *world.a.shared_dead)],
              "action": ACTIONS, "name": list(PRIVATE_TYPES),
              "*": [str(b.endpoint), str(b.events[0]), str(b.dead[0])]}
    before = _database(db_url)
    tried = 0
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        for method, template in all_routes(app):
            if template in ("/logout", "/login"):
                continue  # they end or start this browser's own session, no tenant data
            for path in fill(template, values):
                for variant in _attacks(world, csrf):
                    answer = _send(client, method, path, csrf, variant)
                    tried += 1
                    assert answer.status_code < 500, (method, path, variant, answer.text)
                    sent = path + json.dumps(variant)  # echoing the request is no leak
                    leaked = [m for m in _marks(world) if m in answer.text and m not in sent]
                    assert not leaked, (method, path, variant, leaked, answer.text[:300])
                after = _database(db_url)
                changes = _changes(before, after)
                assert _only_own_new_endpoints(changes), (method, path, changes)
                before = after
    assert tried > 200


def _send(client: TestClient, method: str, path: str, csrf: str,
          variant: dict[str, Any]) -> Any:
    return client.request(method, path, headers={"X-CSRF-Token": csrf}, **variant)


def _own_requests(world: World, db_url: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(method, route template, path, request) naming acme's own objects, for every portal
    write route; in order (disable before enable, a replay while the endpoint is enabled)."""
    a = world.a
    e = str(a.endpoint)
    key_head = _ordered_dead_head(db_url)
    t = "/api/portal/endpoints/{endpoint_id}"
    p = "/portal/endpoints/{endpoint_id}"
    cases: list[tuple[str, str, str, dict[str, Any]]] = [
        ("POST", "/api/portal/endpoints", "", {"json": {"url": BASE + "acme-new"}}),
        ("PATCH", t, "", {"json": {"description": "changed by acme"}}),
        ("POST", t + "/disable", "", {}),
        ("POST", t + "/enable", "", {}),
        ("POST", t + "/rotate-secret", "", {"json": {"grace": "0s", "force": True}}),
        ("POST", "/api/portal/replay", "", {"json": {"ids": a.dead[:1], "confirm": True}}),
        ("POST", "/api/portal/skip", "", {"json": {"ids": [key_head]}}),
        ("POST", "/portal/endpoints", "", {"data": {"url": BASE + "acme-page"}}),
        ("POST", p, "", {"data": {"url": BASE + "acme-moved", "description": "moved"}}),
        ("POST", p + "/{action}", "/disable", {"data": {}}),
        ("POST", p + "/{action}", "/enable", {"data": {}}),
        ("POST", p + "/{action}", "/rotate", {"data": {"grace": "0"}}),
        ("POST", "/portal/replay", "", {"data": {"ids": str(a.dead[1])}}),
    ]
    return [(m, tpl, tpl.replace("{endpoint_id}", e).replace("/{action}", action), kw)
            for m, tpl, action, kw in cases]


def _ordered_dead_head(db_url: str) -> int:
    """A dead delivery of acme's that holds its key on an ordered endpoint of acme's."""
    endpoint = add_endpoint(db_url, BASE + "acme-ordered", tenant="acme", ordered=True)
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [outbox.Event("invoice.paid", {"n": i}, tenant="acme", key="k")
                             for i in range(2)])
        c.commit()
    head = delivery_ids(db_url, "endpoint_id = %s", (endpoint,))[0]
    kill(db_url, [head])
    return head


# Portal POST routes that only answer a question (they change nothing): each must answer
# for acme's own endpoint (below), so the attack above, which they answer 404, is not vacuous.
READ_ONLY_POSTS = {("POST", "/api/portal/endpoints/{endpoint_id}/test-filter")}


def test_the_attack_is_not_vacuous(db_url: str, app: FastAPI, web_settings: WebSettings,
                                   world: World) -> None:
    """Each portal write route, asked the same way about acme's own objects, does change
    the database: so the test above, which sees nothing change, would notice a route
    that skipped the tenant check. A new write route must get a case here."""
    a = world.a
    requests = _own_requests(world, db_url)
    writes = {(m, p) for m, p in all_routes(app) if m != "GET" and is_portal(p)}
    assert {(m, tpl) for m, tpl, _, _ in requests} == writes - READ_ONLY_POSTS
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        h = {"X-CSRF-Token": csrf}
        for method, tpl in READ_ONLY_POSTS:
            path = tpl.replace("{endpoint_id}", str(a.endpoint))
            before = _database(db_url)
            answer = client.request(method, path, headers=h, json={"n": 1})
            assert answer.status_code == 200 and str(a.endpoint) not in answer.text, path
            assert _database(db_url) == before
        assert str(a.endpoint) in client.get(f"/api/portal/endpoints/{a.endpoint}").text
        assert str(a.events[0]) in client.get(f"/api/portal/events/{a.events[0]}").text
        for method, _, path, given in requests:
            kwargs = {"data": {**given["data"], "csrf_token": csrf}} if "data" in given else given
            before = _database(db_url)
            answer = client.request(method, path, headers=h, **kwargs)
            assert answer.status_code in (200, 201, 303), (method, path, answer.text[:500])
            assert _database(db_url) != before, (method, path)
