"""Payload filters in the pages: the console's endpoint list shows an endpoint's filter;
the portal's add and edit forms set, show, refuse (nothing written) and remove one."""

from __future__ import annotations

import html
import json

import psycopg
from fastapi import FastAPI

from outbox.admin import endpoints as ep
from outbox.admin.portal import WebSettings
from tests.support.cli import execute
from tests.support.pg import SCHEMA
from tests.web.conftest import World, enter_portal, new_client
from tests.web.test_console_pages import Client, check_page

BIG = {"amount": {"$gte": 100}}


def test_the_console_shows_the_filter(operator: Client, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.add(c, "http://127.0.0.1:9/f", schema=SCHEMA, filter=BIG)
        ep.add(c, "http://127.0.0.1:9/plain", schema=SCHEMA)
    client, csrf = operator
    page = client.get("/endpoints")
    assert page.status_code == 200
    check_page(page.text, csrf)
    text = html.unescape(page.text)
    assert text.count("filter {") == 1
    assert 'filter {"amount": {"$gte": 100}}' in text


def test_the_portal_forms_set_show_refuse_and_remove_a_filter(
        app: FastAPI, web_settings: WebSettings, world: World, db_url: str) -> None:
    client = new_client(app)
    csrf = enter_portal(client, web_settings, "acme")
    base = f"/portal/endpoints/{world.a.endpoint}"

    def stored() -> object:
        return execute(db_url, f"SELECT filter FROM {SCHEMA}.endpoints WHERE id = %s",
                       (world.a.endpoint,))[0][0]

    refused = client.post(base, data={"csrf_token": csrf, "url": "http://127.0.0.1:9/a",
                                      "payload_filter": '{"amount": {"$gte": []}}'})
    assert refused.status_code == 400
    assert "filter.amount.$gte: must be a number or a string" in html.unescape(refused.text)
    assert '{"amount": {"$gte": []}}' in html.unescape(refused.text)  # kept in the form
    assert stored() is None
    saved = client.post(base, data={"csrf_token": csrf, "url": "http://127.0.0.1:9/a",
                                    "payload_filter": json.dumps(BIG)})
    assert saved.status_code == 303 and stored() == BIG
    form = html.unescape(client.get(base).text)
    assert '>{"amount": {"$gte": 100}}</textarea>' in form
    assert 'filter {"amount": {"$gte": 100}}' in html.unescape(client.get("/portal/").text)
    cleared = client.post(base, data={"csrf_token": csrf, "url": "http://127.0.0.1:9/a",
                                      "payload_filter": " "})
    assert cleared.status_code == 303 and stored() is None
    added = client.post("/portal/endpoints", data={
        "csrf_token": csrf, "url": "http://127.0.0.1:9/new", "payload_filter": '{"who": "acme"}'})
    assert added.status_code == 200
    assert execute(db_url, f"SELECT filter FROM {SCHEMA}.endpoints WHERE url = %s",
                   ("http://127.0.0.1:9/new",)) == [({"who": "acme"},)]
