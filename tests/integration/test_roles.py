"""migrations/roles.sql: the app role can emit and nothing else; the worker can deliver."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

import outbox
from outbox import DatabaseError, Event
from outbox.admin import endpoints as ep
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, drain, settings, states

ROLES_SQL = Path(__file__).resolve().parents[2] / "migrations" / "roles.sql"


def _as(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def _apply(url: str, variables: dict[str, str]) -> None:
    text = ROLES_SQL.read_text()
    text = re.sub(r':"(\w+)"', lambda m: sql.Identifier(variables[m[1]]).as_string(), text)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(text.encode())


@pytest.fixture
def roles(db_url: str) -> Iterator[tuple[str, str]]:
    app, worker = f"app_{uuid.uuid4().hex[:8]}", f"worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as c:
        for role in (app, worker):
            c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    _apply(db_url, {"schema": SCHEMA, "app_role": app, "worker_role": worker})
    yield app, worker
    with psycopg.connect(db_url, autocommit=True) as c:
        for role in (app, worker):
            c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_app_role_can_emit_but_not_read_secrets_or_claim(
    db_url: str, roles: tuple[str, str]
) -> None:
    app, _worker = roles
    add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(_as(db_url, app)) as c:
        first = outbox.emit(c, Event("x", {"a": 1}, idempotency_key="k"))
        assert outbox.emit(c, Event("x", {}, idempotency_key="k")) == first
        outbox.emit_many(c, [Event("x", {"n": i}) for i in range(3)])
        c.commit()
        for forbidden in ("SELECT secret FROM outbox.endpoints",
                          "UPDATE outbox.deliveries SET state = 'dead'",
                          "SELECT payload FROM outbox.events",
                          "DELETE FROM outbox.events",
                          "CREATE TABLE outbox.mine (id int)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(forbidden.encode())
            c.rollback()
    assert states(db_url) == {"pending": 4}


def test_app_role_emits_through_payload_filters(db_url: str, roles: tuple[str, str]) -> None:
    """Every emit path evaluates filters with the app role's grants (it reads
    endpoints.filter_path, never events.payload: the payload comes from the statement)."""
    app, _worker = roles
    add_endpoint(db_url, "http://127.0.0.1:9/big", filter={"n": {"$gte": 2}})
    with psycopg.connect(_as(db_url, app)) as c:
        outbox.emit(c, Event("x", {"n": 1}))
        outbox.emit(c, Event("x", {"n": 2}))
        outbox.emit(c, Event("x", {"n": 3}, idempotency_key="k3"))
        outbox.emit_many(c, [Event("x", {"n": i}) for i in (0, 4)])  # COPY refused: INSERT
        outbox.emit_many(c, [Event("x", {"n": i}, idempotency_key=f"m{i}") for i in (1, 5)])
        c.execute("SELECT outbox.emit('x', '{\"n\": 6}')")
        c.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(b"SELECT filter FROM outbox.endpoints")
    with psycopg.connect(db_url) as c:
        got = c.execute("SELECT (e.payload->>'n')::int FROM outbox.deliveries d"
                        " JOIN outbox.events e ON e.id = d.event_id ORDER BY 1").fetchall()
    assert [n for (n,) in got] == [2, 3, 4, 5, 6]


def test_worker_role_can_deliver(db_url: str, roles: tuple[str, str]) -> None:
    from outbox.testing.receiver import Receiver

    _app, worker = roles
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/w")
        with psycopg.connect(db_url) as c:
            outbox.emit_many(c, [Event("x", {"n": i}) for i in range(5)])
            c.commit()
        drain(settings(_as(db_url, worker)))
        assert rx.wait_for(5, 5)
    assert states(db_url) == {"delivered": 5}
    with psycopg.connect(_as(db_url, worker)) as c, pytest.raises(
            psycopg.errors.InsufficientPrivilege):
        c.execute(b"INSERT INTO outbox.events (id, type, payload)"
                  b" VALUES (gen_random_uuid(), 'x', '{}')")


def test_privilege_errors_are_translated(db_url: str, roles: tuple[str, str]) -> None:
    app, _worker = roles
    with psycopg.connect(_as(db_url, app)) as c, pytest.raises(
            DatabaseError, match="InsufficientPrivilege: permission denied"):
        ep.list_all(c, schema=SCHEMA)  # reads secrets' table columns the app may not see
