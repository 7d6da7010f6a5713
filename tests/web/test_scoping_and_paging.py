"""Dead-letter pages reach every row exactly once (keyset on finished_at and id), the portal
registers endpoints under its own (strict) network policy, and shows only events that went
to the tenant's own endpoints."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

import outbox
from outbox.admin.portal import WebSettings
from outbox.web import create_app
from tests.support.cli import delivery_ids, execute, kill
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint
from tests.web.conftest import BASE, TOKEN, enter_portal, new_client, snapshot


def _all_pages(client: TestClient, path: str, **params: object) -> list[int]:
    seen: list[int] = []
    cursor = None
    for _ in range(20):
        answer = client.get(path, params={**params, "limit": 3,
                                          **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        seen += [row["id"] for row in body["dead"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError(f"no last page after 20: {seen}")


@pytest.fixture
def same_second(db_url: str) -> tuple[uuid.UUID, list[int]]:
    """acme's endpoint and 8 of its deliveries that died in one batch: one finished_at."""
    endpoint = add_endpoint(db_url, BASE + "acme", tenant="acme")
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [outbox.Event("invoice.paid", {"n": i}, tenant="acme")
                             for i in range(8)])
        c.commit()
    dead = delivery_ids(db_url)
    kill(db_url, dead)  # one UPDATE: one now()
    assert len(dead) == 8
    assert len(execute(db_url, f"SELECT DISTINCT finished_at FROM {SCHEMA}.deliveries")) == 1
    return endpoint, dead


@pytest.mark.parametrize("params", [{}, {"tenant": "acme"}, {"event_type": "invoice.paid"}],
                         ids=["all", "tenant (split per endpoint)", "event type"])
def test_dead_pages_reach_rows_sharing_a_finished_at(
        api: TestClient, same_second: tuple[uuid.UUID, list[int]],
        params: dict[str, str]) -> None:
    _, dead = same_second
    seen = _all_pages(api, "/api/dead", **params)
    assert sorted(seen) == sorted(dead) and len(seen) == len(set(seen)), seen
    assert seen == sorted(seen, reverse=True)  # one finished_at: newest id first


def test_portal_dead_pages(app: FastAPI, web_settings: WebSettings,
                           same_second: tuple[uuid.UUID, list[int]]) -> None:
    endpoint, dead = same_second
    with new_client(app) as client:
        enter_portal(client, web_settings, "acme")
        seen = _all_pages(client, "/api/portal/dead")
        assert sorted(seen) == sorted(dead) and len(seen) == len(set(seen)), seen
        assert sorted(_all_pages(client, "/api/portal/dead", endpoint=str(endpoint))) == \
            sorted(dead)


@pytest.mark.parametrize("cursor", ["x", "2026-01-01T00:00:00|1", "|", "2026-01-01T00:00Z|0",
                                    "2026-01-01T00:00Z|-5", "2026-01-01T00:00Z|1|2",
                                    "\x00", "9" * 100])
def test_a_garbage_cursor_is_400(api: TestClient, cursor: str) -> None:
    answer = api.get("/api/dead", params={"cursor": cursor})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_cursor"


@pytest.fixture
def wide(db_url: str) -> Iterator[tuple[TestClient, TestClient, WebSettings]]:
    """The operator and a portal session of acme, with OUTBOX_ALLOW_NETWORKS=10.0.0.0/8
    (and OUTBOX_PORTAL_ALLOW_NETWORKS unset)."""
    settings = WebSettings(database_url=db_url, schema_name=SCHEMA, admin_token=SecretStr(TOKEN),
                           allow_networks="10.0.0.0/8")
    app = create_app(settings)
    with new_client(app) as operator, new_client(app) as portal:
        operator.headers["Authorization"] = f"Bearer {TOKEN}"
        portal.headers["X-CSRF-Token"] = enter_portal(portal, settings, "acme")
        yield operator, portal, settings


def test_the_portal_does_not_get_the_operators_networks(db_url: str, wide: tuple[
        TestClient, TestClient, WebSettings]) -> None:
    operator, portal, _ = wide
    internal = "http://10.1.2.3/hook"
    mine = operator.post("/api/endpoints", json={"url": internal + "0", "tenant": "acme"})
    assert mine.status_code == 201, mine.text  # the operator's policy lets 10/8 through
    own = mine.json()["endpoint"]["id"]
    before = snapshot(db_url)
    refused = [
        portal.post("/api/portal/endpoints", json={"url": internal}),
        portal.patch(f"/api/portal/endpoints/{own}", json={"url": internal + "1"}),
        portal.post("/portal/endpoints", data={"url": internal, "csrf_token": portal.headers[
            "X-CSRF-Token"]}),
        portal.post(f"/portal/endpoints/{own}", data={"url": internal + "2", "csrf_token":
                                                       portal.headers["X-CSRF-Token"]}),
    ]
    assert [r.status_code for r in refused] == [422, 422, 400, 400], [r.text for r in refused]
    assert all("10.1.2.3" in r.text for r in refused)
    assert snapshot(db_url) == before
    opened = WebSettings(database_url=db_url, schema_name=SCHEMA, admin_token=SecretStr(TOKEN),
                         allow_networks="10.0.0.0/8", portal_allow_networks="10.1.0.0/16")
    with new_client(create_app(opened)) as client:
        client.headers["X-CSRF-Token"] = enter_portal(client, opened, "acme")
        allowed = client.post("/api/portal/endpoints", json={"url": internal})
        assert allowed.status_code == 201, allowed.text


def test_the_portal_lists_only_events_its_endpoints_received(
        db_url: str, api: TestClient, app: FastAPI, web_settings: WebSettings) -> None:
    add_endpoint(db_url, BASE + "acme", tenant="acme", event_types=["invoice.*"])
    add_endpoint(db_url, BASE + "audit", all_tenants=True)
    with psycopg.connect(db_url) as c:
        paid = outbox.emit(c, outbox.Event("invoice.paid", {"n": 1}, tenant="acme"))
        audit = outbox.emit(c, outbox.Event("internal.audit", {"secret": "s3cr3t"},
                                            tenant="acme"))
        c.commit()
    operator = {e["id"] for e in api.get("/api/events?tenant=acme").json()["events"]}
    assert operator == {str(paid), str(audit)}
    with new_client(app) as client:
        enter_portal(client, web_settings, "acme")
        listed = client.get("/api/portal/events").json()
        assert [e["id"] for e in listed["events"]] == [str(paid)]
        assert client.get("/api/portal/events", params={"type": "internal.audit"}
                          ).json()["events"] == []
        assert client.get(f"/api/portal/events/{audit}").status_code == 404
        assert client.get(f"/api/portal/events/{paid}").status_code == 200
        page = client.get("/portal/log")
        assert page.status_code == 200 and "invoice.paid" in page.text
        assert "internal.audit" not in page.text
        detail = client.get(f"/portal/events/{audit}")
        assert detail.status_code == 404 and "s3cr3t" not in detail.text
