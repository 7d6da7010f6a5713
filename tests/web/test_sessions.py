"""Sessions you can end and answers nobody keeps: logout revokes the session on the server
(a copied cookie is refused), every authenticated answer is no-store and varies with the
credentials, pages run no script, failed sign-ins are limited, every spelling of a link's
token is redacted, and portal links never come from the Host header."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from outbox.web import create_app
from outbox.web.app import CSP, PUBLIC_PATHS
from outbox.web.redact import redact
from tests.web.conftest import TOKEN, World, enter_portal, login, new_client
from tests.web.routes import all_routes, fill, is_portal

IDS = {"*": ["x"]}


def _copy(client: TestClient, app: FastAPI) -> TestClient:
    other = new_client(app)
    other.cookies.update(client.cookies)
    return other


def test_logout_ends_the_operator_session_on_the_server(app: FastAPI, world: World) -> None:
    with new_client(app) as client:
        csrf = login(client)
        with _copy(client, app) as stolen:
            assert stolen.get("/api/endpoints").status_code == 200
            done = client.post("/logout", data={"csrf_token": csrf})
            assert done.status_code == 303
            assert stolen.get("/api/endpoints").status_code == 401
            page = stolen.get("/")
            assert page.status_code == 303 and page.headers["location"].startswith("/login")
            assert stolen.post("/logout", data={"csrf_token": csrf}).status_code == 303


def test_logout_ends_the_portal_session_on_the_server(app: FastAPI, world: World,
                                                      web_settings: WebSettings) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        with _copy(client, app) as stolen:
            assert stolen.get("/api/portal/endpoints").status_code == 200
            assert client.post("/logout", headers={"X-CSRF-Token": csrf}).status_code == 303
            assert stolen.get("/api/portal/endpoints").status_code == 401
            assert stolen.get("/portal/").headers["location"] == "/portal/expired"
        # a new link opens a new session
        enter_portal(client, web_settings, "acme")
        assert client.get("/api/portal/endpoints").status_code == 200


def _gets(app: FastAPI, portal: bool) -> list[str]:
    public = PUBLIC_PATHS | {"/static/outbox.css", "/portal/expired"}
    return [path for method, template in all_routes(app) if method == "GET"
            and template not in public and is_portal(template) == portal
            for path in fill(template, IDS)]


def _private(answer_headers: dict[str, str], where: str) -> None:
    assert answer_headers["cache-control"] == "no-store", where
    vary = {v.strip().lower() for v in answer_headers["vary"].split(",")}
    assert {"cookie", "authorization"} <= vary, where
    assert answer_headers["content-security-policy"] == CSP, where
    assert answer_headers["referrer-policy"] == "no-referrer", where


def test_every_authenticated_answer_is_private(app: FastAPI, world: World,
                                               web_settings: WebSettings) -> None:
    with new_client(app) as operator, new_client(app) as customer:
        login(operator)
        enter_portal(customer, web_settings, "acme")
        walked = 0
        for client, portal in ((operator, False), (customer, True)):
            for path in _gets(app, portal):
                answer = client.get(path)
                assert answer.status_code < 500, (path, answer.status_code)
                _private(dict(answer.headers), path)
                walked += 1
        bearer = operator.get("/api/endpoints", headers={"Authorization": f"Bearer {TOKEN}"})
        _private(dict(bearer.headers), "bearer")
    assert walked > 15
    css = new_client(app).get("/static/outbox.css")
    assert css.headers["cache-control"].startswith("public")


def test_every_authenticated_answer_to_a_change_is_private(
        app: FastAPI, world: World, web_settings: WebSettings) -> None:
    """POST, PATCH, PUT and DELETE of every route too, answered or refused (an empty body
    or a CSRF token missing is a 4xx, still an authenticated answer)."""
    with new_client(app) as operator, new_client(app) as customer:
        csrf = {False: login(operator), True: enter_portal(customer, web_settings, "acme")}
        walked = 0
        for method, template in all_routes(app):
            if method in ("GET", "HEAD") or template in PUBLIC_PATHS:
                continue
            portal = is_portal(template)
            client = customer if portal else operator
            for path in fill(template, IDS):
                answer = client.request(method, path, json={},
                                        headers={"X-CSRF-Token": csrf[portal]})
                assert answer.status_code < 500, (method, path, answer.status_code)
                _private(dict(answer.headers), f"{method} {path}")
                walked += 1
    assert walked > 15


def test_failed_sign_ins_are_limited(app: FastAPI) -> None:
    with new_client(app) as client:
        def attempt(token: str) -> int:
            form = client.get("/login")
            nonce = form.text.split('name="csrf_token" value="')[1].split('"')[0]
            answer = client.post("/login", data={"token": token, "csrf_token": nonce})
            if answer.status_code == 429:
                assert int(answer.headers["retry-after"]) > 0
            return int(answer.status_code)

        assert [attempt("wrong") for _ in range(10)] == [401] * 10
        assert attempt("wrong") == 429
        assert attempt(TOKEN) == 429  # the right token waits too: guessing stops
        assert "outbox_session" not in client.cookies


@pytest.mark.parametrize("spelling", [
    "token=", "TOKEN=", "%74oken=", "%54%4F%4B%45%4E=", "tok%65n=", "token%3D", "%74OKEN%3d"])
def test_every_spelling_of_the_token_is_redacted(spelling: str) -> None:
    line = f"/portal/enter?x=1&{spelling}secret.value&y=2 HTTP/1.1"
    assert "secret.value" not in redact(line) and "[redacted]" in redact(line)
    assert redact("/api/events?csrf_token=abc") == "/api/events?csrf_token=abc"


def test_portal_links_never_come_from_the_host_header(
        db_url: str, web_settings: WebSettings) -> None:
    public = web_settings.model_copy(update={"public_url": "https://hooks.example.com/ob"})
    for settings, expected in ((web_settings, None), (public, "https://hooks.example.com/ob")):
        with new_client(create_app(settings)) as client:
            answer = client.post("/api/portal-links", json={"tenant": "acme"},
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Host": "evil.example"})
            if expected is None:
                assert answer.status_code == 422, answer.text
            else:
                assert answer.json()["url"].startswith(expected + "/portal/enter?token=")
            assert "evil.example" not in answer.text
