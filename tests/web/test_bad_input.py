"""Bad input gets a 4xx with a stable JSON error code, never a 500, and changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.web.conftest import World, enter_portal, new_client, snapshot

NOWHERE = str(uuid.UUID(int=7))
E = "{endpoint}"  # replaced by acme's endpoint id

# (method, path, request kwargs, status, code)
OPERATOR: list[tuple[str, str, dict[str, Any], int, str]] = [
    ("GET", "/api/endpoints?after=zz", {}, 422, "invalid_parameter"),
    ("GET", "/api/endpoints?limit=0", {}, 422, "invalid_request"),
    ("GET", "/api/endpoints?enabled=maybe", {}, 422, "invalid_request"),
    ("GET", "/api/endpoints?tenant=", {}, 422, "invalid_parameter"),
    ("GET", "/api/endpoints/not-a-uuid", {}, 404, "endpoint_not_found"),
    ("GET", f"/api/endpoints/{NOWHERE}", {}, 404, "endpoint_not_found"),
    ("PATCH", "/api/endpoints/1;DROP", {"json": {"description": "x"}}, 404, "endpoint_not_found"),
    ("POST", f"/api/endpoints/{NOWHERE}/disable", {}, 404, "endpoint_not_found"),
    ("POST", f"/api/endpoints/{NOWHERE}/ping", {}, 404, "endpoint_not_found"),
    ("POST", "/api/endpoints", {"json": {"url": "ftp://x/"}}, 422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://10.1.2.3/"}}, 422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "tenant": ""}}, 422,
     "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "tenant": "a",
                                         "all_tenants": True}}, 422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "secret": "nope"}},
     422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/",
                                         "headers": {"Host": "x"}}}, 422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "max_attempts": 1000}},
     422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "typo": 1}}, 422,
     "invalid_request"),
    ("POST", "/api/endpoints", {"json": ["http://127.0.0.1:9/"]}, 422, "invalid_request"),
    ("POST", "/api/endpoints", {"content": b"{not json", "headers": {
        "content-type": "application/json"}}, 422, "invalid_request"),
    ("POST", "/api/endpoints", {"content": b"url=x", "headers": {
        "content-type": "text/plain"}}, 422, "invalid_request"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/" + "a" * 3000}}, 422,
     "invalid_request"),
    ("PATCH", f"/api/endpoints/{E}", {"json": {"event_types": ["a"], "all_event_types": True}},
     422, "invalid_endpoint"),
    ("PATCH", f"/api/endpoints/{E}", {"json": {"url": "javascript:alert(1)"}}, 422,
     "invalid_endpoint"),
    ("POST", f"/api/endpoints/{E}/rotate-secret", {"json": {"grace": "-1h"}}, 422,
     "invalid_parameter"),
    ("POST", f"/api/endpoints/{E}/rotate-secret", {"json": {"grace": "soon"}}, 422,
     "invalid_parameter"),
    ("GET", "/api/events?before=xyz", {}, 422, "invalid_parameter"),
    ("GET", "/api/events?limit=0", {}, 422, "invalid_request"),
    ("GET", "/api/events?limit=100000", {}, 422, "invalid_request"),
    ("GET", "/api/events?since=yesterday", {}, 422, "invalid_parameter"),
    ("GET", "/api/events?since=1h&until=2h", {}, 422, "invalid_parameter"),
    ("GET", "/api/events?tenant=%01", {}, 422, "invalid_parameter"),
    ("GET", "/api/events?type=" + "t" * 200, {}, 422, "invalid_parameter"),
    ("GET", "/api/events?since=0001-01-01T00:00:00Z", {}, 422, "invalid_parameter"),
    ("GET", "/api/events/not-a-uuid", {}, 404, "event_not_found"),
    ("GET", f"/api/events/{NOWHERE}", {}, 404, "event_not_found"),
    ("GET", "/api/dead?endpoint=zzz", {}, 422, "invalid_parameter"),
    ("GET", "/api/dead?since=never", {}, 422, "invalid_parameter"),
    ("GET", "/api/dead?tenant=" + "t" * 129, {}, 422, "invalid_parameter"),
    ("GET", "/api/dead?limit=-1", {}, 422, "invalid_request"),
    ("POST", "/api/dead/replay", {"json": {}}, 422, "invalid_selection"),
    ("POST", "/api/dead/replay", {"json": {"all": True, "endpoint": E}}, 422,
     "invalid_selection"),
    ("POST", "/api/dead/replay", {"json": {"ids": [0], "confirm": True}}, 422,
     "invalid_parameter"),
    ("POST", "/api/dead/replay", {"json": {"ids": [2**63], "confirm": True}}, 422,
     "invalid_parameter"),
    ("POST", "/api/dead/replay", {"json": {"ids": [987654], "confirm": True}}, 404,
     "delivery_not_found"),
    ("POST", "/api/dead/replay", {"json": {"ids": ["x"], "confirm": True}}, 422,
     "invalid_request"),
    ("POST", "/api/dead/replay", {"json": {"endpoint": "nope", "confirm": True}}, 422,
     "invalid_parameter"),
    ("POST", "/api/dead/replay", {"json": {"all": True, "tenant": "", "confirm": True}}, 422,
     "invalid_parameter"),
    ("POST", "/api/dead/skip", {"json": {"ids": []}}, 422, "invalid_request"),
    ("POST", "/api/dead/skip", {"json": {"ids": [0]}}, 422, "invalid_parameter"),
    ("POST", "/api/dead/skip", {"json": {"ids": [987654]}}, 404, "delivery_not_found"),
    ("GET", "/api/stats?tenant=%1b[2J", {}, 422, "invalid_parameter"),
    ("POST", "/api/portal-links", {"json": {"tenant": ""}}, 422, "invalid_parameter"),
    ("POST", "/api/portal-links", {"json": {"tenant": "a", "expires": "31d"}}, 422,
     "invalid_parameter"),
    ("POST", "/api/portal-links", {"json": {"tenant": "a", "base_url": "ftp://x"}}, 422,
     "invalid_parameter"),
    # NUL (PostgreSQL refuses it in text) and other control characters: refused first
    ("GET", "/api/events?type=%00", {}, 422, "invalid_parameter"),
    ("GET", "/api/events?type=a%00b", {}, 422, "invalid_parameter"),
    ("GET", "/api/dead?event_type=%00", {}, 422, "invalid_parameter"),
    ("GET", "/api/dead?event_type=%ED%A0%80", {}, 422, "invalid_parameter"),
    ("POST", "/api/dead/replay", {"json": {"event_type": "\u0000"}}, 422, "invalid_parameter"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "description":
                                         "a\u0000b"}}, 422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"json": {"url": "http://127.0.0.1:9/", "description":
                                         "\u001b[2J"}}, 422, "invalid_endpoint"),
    ("POST", "/api/endpoints", {"content": b'{"url": "http://127.0.0.1:9/", "description":'
                                b' "\\ud800"}', "headers": {"content-type": "application/json"}},
     422, "invalid_request"),
    ("PATCH", f"/api/endpoints/{E}", {"json": {"description": "\u0000"}}, 422,
     "invalid_endpoint"),
    ("POST", f"/api/endpoints/{E}/disable", {"json": {"reason": "\u0000"}}, 422,
     "invalid_endpoint"),
    ("GET", "/api/dead?cursor=yesterday", {}, 400, "invalid_cursor"),
    ("POST", "/api/portal-links", {"json": {"tenant": "a", "base_url": "http://a b/"}}, 422,
     "invalid_parameter"),
    ("POST", "/api/portal-links", {"json": {"tenant": "a", "base_url": "http://a/\u0000"}},
     422, "invalid_parameter"),
    ("GET", "/api/nope", {}, 404, "not_found"),
    ("DELETE", "/api/endpoints", {}, 405, "method_not_allowed"),
]

PORTAL: list[tuple[str, str, dict[str, Any], int, str]] = [
    ("GET", "/api/portal/endpoints/not-a-uuid", {}, 404, "endpoint_not_found"),
    ("POST", "/api/portal/endpoints", {"json": {"url": "http://10.0.0.1/"}}, 422,
     "invalid_endpoint"),
    ("POST", "/api/portal/endpoints", {"json": {"url": "http://127.0.0.1:9/",
                                                "tenant": "globex"}}, 422, "invalid_request"),
    ("PATCH", f"/api/portal/endpoints/{E}", {"json": {"max_attempts": 3}}, 422,
     "invalid_request"),
    ("POST", f"/api/portal/endpoints/{E}/rotate-secret", {"json": {"grace": "x"}}, 422,
     "invalid_parameter"),
    ("GET", "/api/portal/events?before=1", {}, 422, "invalid_parameter"),
    ("GET", "/api/portal/events/123", {}, 404, "event_not_found"),
    ("GET", "/api/portal/dead?endpoint=zzz", {}, 404, "endpoint_not_found"),
    ("POST", "/api/portal/replay", {"json": {}}, 409, "operation_refused"),
    ("POST", "/api/portal/skip", {"json": {"ids": [987654]}}, 404, "delivery_not_found"),
    ("POST", "/api/portal/replay", {"json": {"ids": [987654]}}, 404, "delivery_not_found"),
    ("POST", "/api/portal/replay", {"json": {"all": True, "since": "whenever"}}, 422,
     "invalid_parameter"),
    ("GET", "/api/portal/events?type=%00", {}, 422, "invalid_parameter"),
    ("POST", "/api/portal/endpoints", {"json": {"url": "http://127.0.0.1:9/",
                                                "description": "a\u0000b"}}, 422,
     "invalid_endpoint"),
    ("PATCH", f"/api/portal/endpoints/{E}", {"json": {"description": "\u0000"}}, 422,
     "invalid_endpoint"),
    ("POST", f"/api/portal/endpoints/{E}/disable", {"json": {"reason": "\u0000"}}, 422,
     "invalid_endpoint"),
    ("GET", "/api/portal/dead?cursor=%00", {}, 400, "invalid_cursor"),
]


def _fill(kwargs: dict[str, Any], endpoint: str) -> dict[str, Any]:
    def sub(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(E, endpoint)
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        return value

    return {k: sub(v) for k, v in kwargs.items()}


def _refused(db_url: str, client: TestClient, world: World, method: str, path: str,
             kwargs: dict[str, Any], status: int, code: str) -> None:
    """The request gets ``status`` with error ``code`` and a message, and writes nothing."""
    before = snapshot(db_url)
    endpoint = str(world.a.endpoint)
    answer = client.request(method, path.replace(E, endpoint), **_fill(kwargs, endpoint))
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    assert answer.json()["error"]["message"]
    assert snapshot(db_url) == before


@pytest.fixture
def portal_client(app: FastAPI, web_settings: WebSettings) -> Iterator[TestClient]:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        client.headers["X-CSRF-Token"] = csrf
        yield client


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "code"), OPERATOR,
                         ids=[f"{m} {p[:50]} {s}" for m, p, _, s, _ in OPERATOR])
def test_operator_bad_input(db_url: str, api: TestClient, world: World, method: str,
                            path: str, kwargs: dict[str, Any], status: int, code: str) -> None:
    _refused(db_url, api, world, method, path, kwargs, status, code)


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "code"), PORTAL,
                         ids=[f"{m} {p[:50]} {s}" for m, p, _, s, _ in PORTAL])
def test_portal_bad_input(db_url: str, portal_client: TestClient, world: World, method: str,
                          path: str, kwargs: dict[str, Any], status: int, code: str) -> None:
    _refused(db_url, portal_client, world, method, path, kwargs, status, code)


def test_oversize_bodies_are_refused_before_the_route(db_url: str, api: TestClient,
                                                      web_settings: WebSettings) -> None:
    before = snapshot(db_url)
    big = b'{"url": "http://127.0.0.1:9/", "description": "' + b"x" * (
        web_settings.max_body_bytes + 1) + b'"}'
    answer = api.post("/api/endpoints", content=big,
                      headers={"content-type": "application/json"})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams
        yield b'{"url": "http://127.0.0.1:9/", "description": "'
        for _ in range(web_settings.max_body_bytes // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    streamed = api.post("/api/endpoints", content=chunks(),
                        headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert snapshot(db_url) == before


def test_database_down_is_503_not_500(web_settings: WebSettings) -> None:
    from outbox.web import create_app

    down = web_settings.model_copy(update={"database_url": "postgresql://127.0.0.1:1/x"})
    with new_client(create_app(down)) as client:
        client.headers["Authorization"] = "Bearer " + web_settings.admin_token.get_secret_value()
        answer = client.get("/api/endpoints")
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "database_unavailable"
        assert client.get("/readyz").status_code == 503


@pytest.mark.parametrize("path", ["/portal/endpoints", "/portal/endpoints/{endpoint}"])
def test_portal_pages_refuse_a_nul_description(db_url: str, portal_client: TestClient,
                                               world: World, path: str) -> None:
    before = snapshot(db_url)
    answer = portal_client.post(path.replace(E, str(world.a.endpoint)), data={
        "url": "http://127.0.0.1:9/x", "description": "a\x00b",
        "csrf_token": portal_client.headers["X-CSRF-Token"]})
    assert answer.status_code == 400 and "control character" in answer.text
    assert snapshot(db_url) == before
