"""``outbox portal-link`` (mints, writes nothing) and ``outbox serve`` (a real process;
refuses a non-loopback address without an admin token)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import IO

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from outbox.admin.portal import WebSettings
from outbox.cli.serve import is_loopback
from outbox.web import create_app
from tests.support.cli import invoke
from tests.support.net import free_port
from tests.support.pg import SCHEMA
from tests.support.workers import wait_until
from tests.web.conftest import World, new_client, snapshot

SECRET = "w" * 40


def test_portal_link_opens_the_tenants_portal(db_url: str, web_settings: WebSettings,
                                              world: World) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, "portal-link", "--tenant", "acme", "--expires", "10m",
                  "--base-url", "https://hooks.example.com/outbox",
                  env={"OUTBOX_WEB_SECRET": SECRET})
    assert done.exit_code == 0, done.output
    url = done.stdout.strip()
    assert url.startswith("https://hooks.example.com/outbox/portal/enter?token=")
    assert "acme" in done.stderr and snapshot(db_url) == before
    app: FastAPI = create_app(web_settings.model_copy(update={"web_secret": SecretStr(SECRET)}))
    with new_client(app) as client:
        opened = client.get(url.removeprefix("https://hooks.example.com/outbox"))
        assert opened.status_code == 303
        assert client.get("/api/portal/endpoints").json()["tenant"] == "acme"
    as_json = invoke(db_url, "portal-link", "--tenant", "acme", "--json",
                     env={"OUTBOX_WEB_SECRET": SECRET})
    assert json.loads(as_json.stdout)["tenant"] == "acme"


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--expires", "31d"], {"OUTBOX_WEB_SECRET": SECRET}, "30 days"),
    (["--expires", "10s"], {"OUTBOX_WEB_SECRET": SECRET}, "shorter than"),
    (["--base-url", "ftp://x"], {"OUTBOX_WEB_SECRET": SECRET}, "base URL"),
    ([], {"OUTBOX_WEB_SECRET": None, "OUTBOX_ADMIN_TOKEN": None}, "OUTBOX_WEB_SECRET"),
])
def test_portal_link_refuses_bad_input(db_url: str, args: list[str],
                                       env: dict[str, str | None], message: str) -> None:
    done = invoke(db_url, "portal-link", "--tenant", "acme", *args, env=env)
    assert done.exit_code in (1, 2) and message in done.output, done.output
    assert "token=" not in done.stdout


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
    ("example.com", False), ("", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com"])
def test_serve_refuses_a_public_address_without_a_token(db_url: str, host: str) -> None:
    done = invoke(db_url, "serve", "--host", host, "--port", "1",
                  env={"OUTBOX_ADMIN_TOKEN": None})
    assert done.exit_code == 1
    assert "without OUTBOX_ADMIN_TOKEN" in done.stderr


def _serve(db_url: str, port: int, log_level: str = "warning", **env: str | None
           ) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    full = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA, **env}
    clean = {k: v for k, v in full.items() if v is not None}
    log = tempfile.TemporaryFile()  # noqa: SIM115 (read after the process)
    proc = subprocess.Popen([sys.executable, "-m", "outbox", "serve", "--port", str(port),
                             "--log-level", log_level], env=clean, stdout=log, stderr=log)
    return proc, log


def _wait_answering(base: str, path: str) -> None:
    """Wait (30 s at most) until ``base + path`` answers 200."""

    def up() -> bool:
        try:
            return httpx.get(base + path, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, 30, f"outbox serve answers {path}")


def test_serve_runs_the_app(db_url: str, world: World) -> None:
    port = free_port()
    proc, _ = _serve(db_url, port, OUTBOX_ADMIN_TOKEN="t0ken-for-serve")
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_answering(base, "/readyz")
        assert httpx.get(base + "/api/endpoints").status_code == 401
        listed = httpx.get(base + "/api/endpoints",
                           headers={"Authorization": "Bearer t0ken-for-serve"})
        assert listed.status_code == 200 and len(listed.json()["endpoints"]) == 3
        assert "server" not in listed.headers
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_without_a_token_on_loopback_prints_a_one_off_token(db_url: str) -> None:
    port = free_port()
    proc, log = _serve(db_url, port, OUTBOX_ADMIN_TOKEN=None)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_answering(base, "/healthz")
        log.seek(0)
        token = log.read().decode().split("one-off token: ")[1].split()[0]
        assert httpx.get(base + "/api/endpoints", headers={
            "Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(base + "/api/endpoints", headers={
            "Authorization": "Bearer x"}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(10)


def test_serves_access_log_redacts_link_tokens(db_url: str) -> None:
    port = free_port()
    proc, log = _serve(db_url, port, log_level="info", OUTBOX_ADMIN_TOKEN="t" * 32)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_answering(base, "/healthz")
        answer = httpx.get(base + "/portal/enter?token=SeCrEtToKeN.sig")
        assert answer.status_code == 401
        assert answer.headers["referrer-policy"] == "no-referrer"
    finally:
        proc.terminate()
        proc.wait(10)
    log.seek(0)
    text = log.read().decode()
    assert "/portal/enter?token=[redacted]" in text, text
    assert "SeCrEtToKeN" not in text
