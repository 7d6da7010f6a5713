"""Portal-link tokens stay out of logs, referrers and caches; answers may not be framed
elsewhere; weak secrets are refused; /readyz says nothing about the database's address;
a portal replay page never enables an endpoint."""

from __future__ import annotations

import io
import logging
import logging.config

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr
from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter

from outbox.admin.portal import WebSettings, mint_link
from outbox.errors import ConfigurationError
from outbox.web import create_app
from outbox.web.app import CSP
from outbox.web.redact import RedactTokens, redact, uvicorn_log_config
from tests.support.cli import invoke
from tests.web.conftest import World, enter_portal, new_client, snapshot

TOKEN_TEXT = "eyJleHAiOjE3fQ.c2lnbmF0dXJl"


@pytest.mark.parametrize(("given", "expected"), [
    (f"/portal/enter?token={TOKEN_TEXT}", "/portal/enter?token=[redacted]"),
    (f"/outbox/portal/enter?x=1&token={TOKEN_TEXT}&y=2",
     "/outbox/portal/enter?x=1&token=[redacted]&y=2"),
    (f"/portal/enter?TOKEN={TOKEN_TEXT} HTTP/1.1", "/portal/enter?TOKEN=[redacted] HTTP/1.1"),
    ("/api/events?type=a.b", "/api/events?type=a.b"),
    ("/api/events?csrf_token=abc", "/api/events?csrf_token=abc"),  # another parameter
])
def test_redact(given: str, expected: str) -> None:
    assert redact(given) == expected


def test_the_filter_redacts_uvicorns_access_log_line() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("10.0.0.1:5000", "GET", f"/portal/enter?token={TOKEN_TEXT}",
                                "1.1", 303), None)
    assert RedactTokens().filter(record) is True
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s').format(
        record)
    assert TOKEN_TEXT not in line and "token=[redacted]" in line, line


def test_serves_log_config_puts_the_filter_on_the_access_logger() -> None:
    config = uvicorn_log_config(LOGGING_CONFIG)
    assert "filters" not in LOGGING_CONFIG["loggers"]["uvicorn.access"]  # a copy
    logging.config.dictConfig(config)
    access = logging.getLogger("uvicorn.access")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    access.addHandler(handler)
    try:
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET",
                    f"/portal/enter?token={TOKEN_TEXT}", "1.1", 303)
    finally:
        access.removeHandler(handler)
    assert TOKEN_TEXT not in out.getvalue() and "[redacted]" in out.getvalue()


def test_portal_enter_sends_no_referrer_and_no_store(anon: TestClient,
                                                     web_settings: WebSettings) -> None:
    link = mint_link("acme", settings=web_settings)
    for path in (f"/portal/enter?token={link.token}", "/portal/enter?token=forged"):
        answer = anon.get(path)
        assert answer.status_code in (303, 401)
        assert answer.headers["referrer-policy"] == "no-referrer", path
        assert answer.headers["cache-control"] == "no-store", path


@pytest.mark.parametrize("path", ["/login", "/healthz", "/api/endpoints", "/portal/expired"])
def test_answers_may_be_framed_only_by_their_own_origin(anon: TestClient, path: str) -> None:
    answer = anon.get(path)
    assert answer.headers["content-security-policy"] == CSP
    assert "script-src 'none'" in CSP and "frame-ancestors 'self'" in CSP
    assert answer.headers["x-frame-options"] == "SAMEORIGIN"
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_mint_link_refuses_a_short_secret(web_settings: WebSettings) -> None:
    short = web_settings.model_copy(update={"admin_token": SecretStr("x" * 31)})
    with pytest.raises(ConfigurationError, match="OUTBOX_ADMIN_TOKEN is 31 characters") as exc:
        mint_link("acme", settings=short)
    assert "x" * 31 not in str(exc.value)
    weak_web = web_settings.model_copy(update={"web_secret": SecretStr("w" * 12)})
    with pytest.raises(ConfigurationError, match="OUTBOX_WEB_SECRET is 12 characters"):
        mint_link("acme", settings=weak_web)
    # the link is signed with OUTBOX_WEB_SECRET when set: a short admin token beside it is
    # for `outbox serve` to judge (loopback only)
    signed = short.model_copy(update={"web_secret": SecretStr("w" * 32)})
    assert mint_link("acme", settings=signed).tenant == "acme"


@pytest.mark.parametrize("env", [{"OUTBOX_ADMIN_TOKEN": "short-token"},
                                 {"OUTBOX_ADMIN_TOKEN": "a" * 40, "OUTBOX_WEB_SECRET": "s" * 8}],
                         ids=["admin token", "web secret"])
def test_serve_refuses_a_short_secret_off_loopback(db_url: str, env: dict[str, str]) -> None:
    done = invoke(db_url, "serve", "--host", "0.0.0.0", "--port", "1", env=env)
    assert done.exit_code == 1 and "at least 32" in done.stderr, done.output
    assert "short-token" not in done.output and "s" * 8 not in done.output


def test_portal_link_cli_refuses_a_short_secret(db_url: str) -> None:
    done = invoke(db_url, "portal-link", "--tenant", "acme",
                  env={"OUTBOX_WEB_SECRET": "too-short", "OUTBOX_ADMIN_TOKEN": None})
    assert done.exit_code == 1 and "at least 32" in done.output, done.output
    assert "token=" not in done.stdout


def test_readyz_does_not_tell_where_the_database_is(web_settings: WebSettings) -> None:
    down = web_settings.model_copy(update={
        "database_url": "postgresql://dbuser:hunter2@127.0.0.1:1/billing_prod"})
    with new_client(create_app(down)) as client:
        answer = client.get("/readyz")
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "not_ready"
    for secret in ("dbuser", "hunter2", "127.0.0.1", "billing_prod", ":1"):
        assert secret not in answer.text, answer.text


def test_a_non_numeric_content_length_is_400(app: FastAPI) -> None:
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    import asyncio

    scope = {"type": "http", "method": "POST", "path": "/api/endpoints", "root_path": "",
             "headers": [(b"content-length", b"12x")], "query_string": b"",
             "http_version": "1.1", "scheme": "https", "server": ("testserver", 443),
             "client": ("127.0.0.1", 1)}
    asyncio.run(app(scope, receive, send))  # type: ignore[arg-type]
    assert sent[0]["status"] == 400


def test_the_portal_replay_page_never_enables_an_endpoint(
        db_url: str, app: FastAPI, web_settings: WebSettings, world: World) -> None:
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        h = {"X-CSRF-Token": csrf}
        client.post(f"/api/portal/endpoints/{world.a.endpoint}/disable", headers=h)
        confirm = client.get("/portal/replay", params={"endpoint": str(world.a.endpoint)})
        assert confirm.status_code == 200 and "enable_endpoints" not in confirm.text
        before = snapshot(db_url)
        answer = client.post("/portal/replay", data={
            "csrf_token": csrf, "endpoint": str(world.a.endpoint), "enable_endpoints": "1"})
        assert answer.status_code == 409, answer.text
        assert snapshot(db_url) == before
