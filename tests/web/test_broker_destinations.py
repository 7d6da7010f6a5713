"""Broker destinations through the API, the console and the portal: registered by the
operator with credentials that no answer shows; refused by the portal, nothing written."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.support.pg import count
from tests.web.conftest import enter_portal, login, new_client

URL = "amqp://app:pw-in-url-42@127.0.0.1:5672/shop?exchange=orders"
SHOWN = "amqp://127.0.0.1:5672/shop?exchange=orders"


def test_the_api_registers_a_broker_and_never_shows_its_credentials(
        db_url: str, app: FastAPI, api: TestClient) -> None:
    created = api.post("/api/endpoints", json={"url": URL, "description": "rabbit"})
    assert created.status_code == 201, created.text
    assert "pw-in-url" not in created.text and created.json()["endpoint"]["url"] == SHOWN
    eid = created.json()["endpoint"]["id"]
    moved = api.patch(f"/api/endpoints/{eid}", json={"url": URL.replace("shop", "eu")})
    assert moved.status_code == 200 and "pw-in-url" not in moved.text
    for path in ("/api/endpoints", f"/api/endpoints/{eid}"):
        answer = api.get(path)
        assert answer.status_code == 200 and "pw-in-url" not in answer.text
    with new_client(app) as operator:
        login(operator)
        page = operator.get("/endpoints")
        assert page.status_code == 200 and "pw-in-url" not in page.text
        assert "amqp://127.0.0.1:5672/eu?exchange=orders" in page.text


def test_the_api_refuses_a_bad_broker_url(db_url: str, api: TestClient) -> None:
    refused = api.post("/api/endpoints", json={"url": "redis://127.0.0.1/0"})
    assert refused.status_code in (400, 422) and "needs ?stream=NAME" in refused.text
    assert count(db_url, "endpoints") == 0


def test_the_portal_cannot_register_a_broker(db_url: str, app: FastAPI,
                                             web_settings: WebSettings) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        for url in (URL, "nats://127.0.0.1:4222", "redis://127.0.0.1/0?stream=s"):
            refused = client.post("/api/portal/endpoints", json={"url": url},
                                  headers={"X-CSRF-Token": csrf})
            assert refused.status_code in (400, 422), refused.text
            assert "operator's to register" in refused.text and "pw-in-url" not in refused.text
            page = client.post("/portal/endpoints", data={"url": url, "csrf_token": csrf})
            assert page.status_code == 400 and "operator&#39;s to register" in page.text
    assert count(db_url, "endpoints") == 0
