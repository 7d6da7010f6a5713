"""Operational events in the web pages: the portal's endpoint form subscribes an endpoint
to its tenant's operational events, and the console overview lists the newest ones."""

from __future__ import annotations

import psycopg
import pytest
from fastapi import FastAPI

from outbox.admin import endpoints as ep
from outbox.admin import opevents
from outbox.admin.portal import WebSettings
from outbox.errors import InvalidEvent
from tests.support.cli import execute
from tests.support.pg import SCHEMA
from tests.web.conftest import World, enter_portal, login, new_client


def test_portal_form_subscribes_to_operational_events(app: FastAPI,
                                                      web_settings: WebSettings,
                                                      world: World, db_url: str) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        assert 'name="operational"' in client.get("/portal/").text
        added = client.post("/portal/endpoints", data={
            "csrf_token": csrf, "url": "http://127.0.0.1:9/ops", "event_types": "",
            "operational": "on"})
        assert added.status_code == 200
        ((endpoint_id, types),) = execute(
            db_url, f"SELECT id, event_types FROM {SCHEMA}.endpoints"
                    " WHERE url = 'http://127.0.0.1:9/ops'")
        assert types == ["outbox.*"]
        form = client.get(f"/portal/endpoints/{endpoint_id}").text
        assert 'name="operational" value="on" checked' in form
        saved = client.post(f"/portal/endpoints/{endpoint_id}", data={
            "csrf_token": csrf, "url": "http://127.0.0.1:9/ops", "description": "",
            "event_types": "invoice.*"})  # box unticked: operational events dropped
        assert saved.status_code == 303
        assert execute(db_url, f"SELECT event_types FROM {SCHEMA}.endpoints WHERE id = %s",
                       (endpoint_id,)) == [(["invoice.*"],)]
        # a tenant disabling its endpoint in the portal is reported as the tenant's doing
        client.post(f"/portal/endpoints/{endpoint_id}/disable", data={"csrf_token": csrf})
    with psycopg.connect(db_url) as c:
        (last,) = opevents.recent(c, schema=SCHEMA, limit=1, tenant="acme")
    assert last.type == "outbox.endpoint.disabled" and last.data["by"] == "tenant"
    assert last.data["endpoint_id"] == str(endpoint_id)


def test_overview_lists_recent_operational_events(app: FastAPI, world: World,
                                                  db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.set_enabled(c, world.a.endpoint, False, schema=SCHEMA, reason="db migration")
    with new_client(app) as client:
        login(client)
        page = client.get("/").text
    assert "Recent operational events" in page
    assert "outbox.endpoint.disabled" in page and "db migration" in page
    assert str(world.a.endpoint) in page


def test_recent_refuses_bad_input(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        with pytest.raises(ValueError, match="limit"):
            opevents.recent(c, schema=SCHEMA, limit=0)
        with pytest.raises(InvalidEvent, match="tenant"):
            opevents.recent(c, schema=SCHEMA, tenant="")
