"""Fixtures of the web tests: the app on the test's real database, clients signed in as
the operator (Bearer or cookie) or as a tenant's portal session, and two tenants' data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

import outbox
from outbox.admin import types
from outbox.admin.portal import WebSettings, mint_link
from outbox.web import create_app
from tests.support.cli import delivery_ids, execute, kill
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint

TOKEN = "admin-token-for-tests-0123456789"
BASE = "http://127.0.0.1:9/"


@pytest.fixture
def web_settings(db_url: str) -> WebSettings:
    return WebSettings(database_url=db_url, schema_name=SCHEMA, admin_token=SecretStr(TOKEN),
                       allow_networks="127.0.0.0/8", portal_allow_networks="127.0.0.0/8")


@pytest.fixture
def app(web_settings: WebSettings) -> FastAPI:
    return create_app(web_settings)


def new_client(app: FastAPI) -> TestClient:
    """A client over https (the cookies are Secure), answering 500s instead of raising."""
    return TestClient(app, base_url="https://testserver", raise_server_exceptions=False,
                      follow_redirects=False)


@pytest.fixture
def anon(app: FastAPI) -> Iterator[TestClient]:
    with new_client(app) as client:
        yield client


@pytest.fixture
def api(app: FastAPI) -> Iterator[TestClient]:
    """The operator by Bearer token."""
    with new_client(app) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        yield client


def login(client: TestClient) -> str:
    """Sign ``client`` in through the form; the session's CSRF token."""
    form = client.get("/login")
    nonce = form.text.split('name="csrf_token" value="')[1].split('"')[0]
    done = client.post("/login", data={"token": TOKEN, "csrf_token": nonce, "next": "/"})
    assert done.status_code == 303, done.text
    return session_csrf(client, "/api/endpoints")


def session_csrf(client: TestClient, path: str) -> str:
    """The CSRF token the app hands this session's pages (via auth.csrf_token)."""
    from outbox.web import auth

    app: FastAPI = client.app  # type: ignore[assignment]
    scope = {"type": "http", "path": path, "root_path": "", "headers": [
        (b"cookie", "; ".join(f"{k}={v}" for k, v in client.cookies.items()).encode())],
        "app": app, "query_string": b"", "method": "GET"}
    from starlette.requests import Request

    return auth.csrf_token(Request(scope))


@pytest.fixture
def operator(app: FastAPI) -> Iterator[tuple[TestClient, str]]:
    """The operator by session cookie, and its CSRF token."""
    with new_client(app) as client:
        yield client, login(client)


def enter_portal(client: TestClient, settings: WebSettings, tenant: str) -> str:
    """Open a portal link of ``tenant`` in ``client``; the session's CSRF token."""
    link = mint_link(tenant, settings=settings)
    opened = client.get(link.url.replace("http://127.0.0.1:8000", ""))
    assert opened.status_code == 303, opened.text
    return session_csrf(client, "/api/portal/endpoints")


def snapshot(db_url: str) -> tuple[list[tuple[object, ...]], ...]:
    """Every row an API call might change, as JSON text (a parked delivery's visible_at is
    infinity, which Python's datetime cannot hold)."""
    return tuple(
        execute(db_url, f"SELECT to_jsonb(t)::text FROM {SCHEMA}.{table} t ORDER BY {key}")
        for table, key in (("endpoints", "id"), ("events", "id"), ("deliveries", "id"),
                           ("delivery_attempts", "id"), ("event_types", "name"),
                           ("event_catalog", "version")))


@dataclass
class Tenant:
    name: str
    endpoint: uuid.UUID
    events: list[uuid.UUID]
    dead: list[int]  # its endpoint's dead deliveries
    shared_dead: list[int]  # its events' dead deliveries to the all-tenants endpoint


@dataclass
class World:
    a: Tenant
    b: Tenant
    everyone: uuid.UUID


def make_tenant(db_url: str, name: str) -> Tenant:
    endpoint = add_endpoint(db_url, BASE + name, tenant=name)
    with psycopg.connect(db_url) as c:
        events = outbox.emit_many(c, [outbox.Event("invoice.paid", {"n": i, "who": name},
                                                   tenant=name) for i in range(4)])
        c.commit()
    dead = delivery_ids(db_url, "event_id = ANY (%s) AND endpoint_id = %s",
                        (events[:2], endpoint))
    shared = delivery_ids(db_url, "event_id = ANY (%s) AND endpoint_id <> %s",
                          (events[:2], endpoint))
    kill(db_url, dead + shared)
    return Tenant(name, endpoint, events, dead, shared)


# The event catalog of the world: one type offered to every tenant, one to globex only, one
# to no tenant (internal); a portal session must see only what its tenant is offered.
PAID_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"},
                                                "who": {"type": "string"}}}
PRIVATE_TYPES = ("globex.private", "ops.internal")


def make_catalog(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        types.add(c, "invoice.paid", schema=SCHEMA, json_schema=PAID_SCHEMA,
                  description="An invoice was paid", example={"n": 1, "who": "acme"})
        types.add(c, "globex.private", schema=SCHEMA, description="globex only",
                  tenants=["globex"])
        types.add(c, "ops.internal", schema=SCHEMA, description="ops only", tenants=[])


@pytest.fixture
def world(db_url: str) -> World:
    make_catalog(db_url)
    everyone = add_endpoint(db_url, BASE + "all-tenants", all_tenants=True)
    return World(make_tenant(db_url, "acme"), make_tenant(db_url, "globex"), everyone)
