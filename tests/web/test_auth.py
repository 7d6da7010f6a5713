"""Auth on every route (read from the app, so a new route is covered), the login form and
its cookie, CSRF on every unsafe cookie-authenticated request, portal links."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from outbox.admin import portal
from outbox.admin.portal import WebSettings, mint_link
from outbox.web.app import PUBLIC_PATHS
from tests.web.conftest import TOKEN, World, enter_portal, new_client, snapshot
from tests.web.routes import all_routes, fill, is_portal

# Public on purpose, beyond PUBLIC_PATHS: the console's stylesheet (no data in it).
PUBLIC = PUBLIC_PATHS | {"/static/outbox.css", "/portal/expired"}
IDS = {"endpoint_id": ["01a208a6-19f0-706a-8093-b40be3f4ee27"], "event_id": [
    "01a208a6-19f7-75ed-9024-b0b727dcd927"], "delivery_id": ["1"], "*": ["x"]}


def _refused(status: int, location: str | None) -> bool:
    """401/403, or a page's redirect to the login form (the portal's: to its "link
    expired" page)."""
    return status in (401, 403) or (status in (302, 303, 307) and (location or "").split("?")[0]
                                    in ("/login", "/portal/expired"))


def _protected(app: FastAPI) -> list[tuple[str, str]]:
    return [(m, p) for m, p in all_routes(app) if p not in PUBLIC]


def test_route_list_is_complete(app: FastAPI) -> None:
    paths = {p for _, p in all_routes(app)}
    for expected in ("/api/endpoints", "/api/events/{event_id}", "/api/dead/replay",
                     "/api/stats", "/api/portal/endpoints", "/healthz", "/login"):
        assert expected in paths


def test_every_route_refuses_without_credentials(db_url: str, app: FastAPI,
                                                 anon: TestClient, world: World) -> None:
    before = snapshot(db_url)
    for method, template in _protected(app):
        for path in fill(template, IDS):
            for headers in ({}, {"Authorization": "Bearer wrong-token"},
                            {"Authorization": "Basic " + TOKEN}, {"Accept": "text/html"}):
                answer = anon.request(method, path, headers=headers, json={})
                assert _refused(answer.status_code, answer.headers.get("location")), (
                    method, path, headers, answer.status_code, answer.text[:200])
    assert snapshot(db_url) == before


def test_operator_routes_refuse_a_portal_session(db_url: str, app: FastAPI,
                                                 web_settings: WebSettings,
                                                 world: World) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        before = snapshot(db_url)
        for method, template in _protected(app):
            if is_portal(template):
                continue
            for path in fill(template, IDS):
                answer = client.request(method, path, headers={"X-CSRF-Token": csrf}, json={})
                assert _refused(answer.status_code, answer.headers.get("location")), (
                    method, path, answer.status_code)
        assert snapshot(db_url) == before


def test_portal_routes_refuse_the_operator(app: FastAPI, api: TestClient,
                                           operator: tuple[TestClient, str]) -> None:
    client, csrf = operator
    for method, template in _protected(app):
        if not is_portal(template):
            continue
        for path in fill(template, IDS):
            for who in (api, client):
                answer = who.request(method, path, headers={"X-CSRF-Token": csrf}, json={})
                assert _refused(answer.status_code, answer.headers.get("location")), (
                    method, path, answer.status_code)


def test_login_sets_a_strict_secure_httponly_cookie(anon: TestClient) -> None:
    form = anon.get("/login")
    assert form.status_code == 200 and 'type="password"' in form.text
    nonce = form.text.split('name="csrf_token" value="')[1].split('"')[0]
    done = anon.post("/login", data={"token": TOKEN, "csrf_token": nonce,
                                     "next": "/endpoints"})
    assert done.status_code == 303 and done.headers["location"] == "/endpoints"
    cookie = next(c for c in done.headers.get_list("set-cookie")
                  if c.startswith("outbox_session="))
    attributes = {a.strip().lower() for a in cookie.split(";")}
    assert {"secure", "httponly", "samesite=strict", "path=/"} <= attributes
    assert anon.get("/api/endpoints").status_code == 200  # the cookie is a session


def test_login_refuses_a_wrong_token_and_a_foreign_form(anon: TestClient) -> None:
    form = anon.get("/login")
    nonce = form.text.split('name="csrf_token" value="')[1].split('"')[0]
    wrong = anon.post("/login", data={"token": TOKEN + "x", "csrf_token": nonce})
    assert wrong.status_code == 401 and "not the admin token" in wrong.text
    assert "outbox_session" not in anon.cookies
    forged = anon.post("/login", data={"token": TOKEN, "csrf_token": "guess"})
    assert forged.status_code == 403
    assert "outbox_session" not in anon.cookies


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/", "/\\evil"])
def test_login_never_redirects_off_site(anon: TestClient, target: str) -> None:
    form = anon.get("/login")
    nonce = form.text.split('name="csrf_token" value="')[1].split('"')[0]
    done = anon.post("/login", data={"token": TOKEN, "csrf_token": nonce, "next": target})
    assert done.headers["location"] == "/"


def test_a_changed_admin_token_ends_sessions(db_url: str, web_settings: WebSettings,
                                             operator: tuple[TestClient, str]) -> None:
    client, _ = operator
    from outbox.web import create_app

    other = create_app(web_settings.model_copy(update={"web_secret": SecretStr("k" * 32)}))
    with new_client(other) as fresh:
        fresh.cookies.update(client.cookies)
        assert fresh.get("/api/endpoints").status_code == 401  # signed under another key
    rotated = create_app(web_settings.model_copy(update={
        "admin_token": SecretStr("another-token")}))
    with new_client(rotated) as fresh:
        fresh.cookies.update(client.cookies)
        assert fresh.get("/api/endpoints").status_code == 401


def test_no_admin_token_means_no_operator(db_url: str, web_settings: WebSettings) -> None:
    from outbox.web import create_app

    app = create_app(web_settings.model_copy(update={"admin_token": SecretStr("")}))
    with new_client(app) as client:
        assert client.get("/api/endpoints", headers={"Authorization": "Bearer "}
                          ).status_code == 401
        form = client.get("/login")
        assert "No admin token is configured" in form.text


def _unsafe(app: FastAPI) -> list[tuple[str, str]]:
    return [(m, p) for m, p in _protected(app) if m in ("POST", "PUT", "PATCH", "DELETE")]


def test_csrf_is_required_on_every_unsafe_cookie_request(
        db_url: str, app: FastAPI, web_settings: WebSettings, world: World,
        operator: tuple[TestClient, str]) -> None:
    ids = {"endpoint_id": [str(world.a.endpoint)], "event_id": [str(world.a.events[0])],
           "delivery_id": [str(world.a.dead[0])], "*": ["disable"]}
    client, csrf = operator
    with new_client(app) as tenant:
        portal_csrf = enter_portal(tenant, web_settings, "acme")
        before = snapshot(db_url)
        checked = 0
        for method, template in _unsafe(app):
            who, good = (tenant, portal_csrf) if is_portal(template) else (client, csrf)
            for path in fill(template, ids):
                for bad in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": good + "x"}):
                    answer = who.request(method, path, headers=bad, json={"all": True})
                    assert answer.status_code == 403, (method, path, bad, answer.text)
                    assert answer.json()["error"]["code"] == "csrf_failed"
                form = who.request(method, path, data={"csrf_token": "wrong", "all": "1"})
                assert form.status_code == 403, (method, path)
                checked += 1
        assert checked >= 12
        assert snapshot(db_url) == before


def test_csrf_token_in_a_form_field_or_header_passes(
        db_url: str, world: World, operator: tuple[TestClient, str]) -> None:
    client, csrf = operator
    path = f"/api/endpoints/{world.a.endpoint}/disable"
    assert client.post(path, headers={"X-CSRF-Token": csrf}).status_code == 200
    form = client.post(f"/api/endpoints/{world.a.endpoint}/enable",
                       data={"csrf_token": csrf})
    assert form.status_code == 200, form.text


def test_bearer_calls_need_no_csrf(api: TestClient, world: World) -> None:
    assert api.post(f"/api/endpoints/{world.a.endpoint}/disable").status_code == 200


def test_logout_ends_the_session(operator: tuple[TestClient, str]) -> None:
    client, csrf = operator
    assert client.post("/logout", data={"csrf_token": "wrong"}).status_code == 403
    done = client.post("/logout", data={"csrf_token": csrf})
    assert done.status_code == 303
    assert client.get("/api/endpoints").status_code == 401


def test_portal_link_opens_a_lax_session_of_its_tenant(app: FastAPI, anon: TestClient,
                                                       web_settings: WebSettings) -> None:
    link = mint_link("acme", settings=web_settings, expires=dt.timedelta(minutes=5))
    opened = anon.get(link.url.replace(portal.DEFAULT_BASE_URL, ""))
    assert opened.status_code == 303 and opened.headers["location"] == "/portal/"
    cookie = opened.headers["set-cookie"].lower()
    assert "secure" in cookie and "httponly" in cookie and "samesite=lax" in cookie
    assert anon.get("/api/portal/endpoints").json()["tenant"] == "acme"


def test_portal_link_tampered_expired_or_foreign_is_refused(
        anon: TestClient, web_settings: WebSettings) -> None:
    link = mint_link("acme", settings=web_settings)
    body, mac = link.token.split(".")
    other = mint_link("globex", settings=web_settings).token.split(".")[0]
    expired = portal.sign({"tenant": "acme"}, portal.signing_key(web_settings, "portal-link"),
                          time.time() - 1)
    session_kind = portal.sign({"tenant": "acme", "role": "portal", "csrf": "x"},
                               portal.signing_key(web_settings, "session"), time.time() + 60)
    for token in (f"{other}.{mac}", f"{body}.{mac[:-2]}AA", expired, session_kind, "", "x" * 5000,
                  "a.b.c"):
        answer = anon.get("/portal/enter", params={"token": token})
        assert answer.status_code == 401, token
        assert answer.json()["error"]["code"] == "invalid_link"
        assert "outbox_portal" not in anon.cookies


def test_a_session_cookie_is_not_a_link_and_not_forgeable(
        anon: TestClient, web_settings: WebSettings) -> None:
    link = mint_link("acme", settings=web_settings)
    anon.cookies.set("outbox_portal", link.token, domain="testserver")  # a link as a cookie
    assert anon.get("/api/portal/endpoints").status_code == 401
    anon.cookies.set("outbox_session", link.token, domain="testserver")
    assert anon.get("/api/endpoints").status_code == 401


def test_mint_link_refuses_bad_input(web_settings: WebSettings) -> None:
    from outbox.errors import ConfigurationError, InvalidEvent

    with pytest.raises(InvalidEvent):
        mint_link("", settings=web_settings)
    with pytest.raises(ValueError, match="30 days"):
        mint_link("acme", settings=web_settings, expires=dt.timedelta(days=31))
    with pytest.raises(ValueError, match="base URL"):
        mint_link("acme", settings=web_settings, base_url="javascript:alert(1)")
    empty = web_settings.model_copy(update={"admin_token": SecretStr("")})
    with pytest.raises(ConfigurationError, match="OUTBOX_WEB_SECRET"):
        mint_link("acme", settings=empty)
