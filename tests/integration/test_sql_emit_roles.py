"""Privileges of the SQL function emit: roles.sql's app role may call it and nothing else
new; a role granted EXECUTE on emit alone can emit valid events but not touch the tables
(SECURITY DEFINER); no other role can call it; its search_path cannot be hijacked."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests.integration.test_roles import _as, roles  # noqa: F401  (the roles fixture)
from tests.support.pg import SCHEMA, count
from tests.support.workers import add_endpoint

EMIT = "SELECT outbox.emit('order.paid', '{\"id\": 1}', key => 'o-1')"


@pytest.fixture
def bare_role(db_url: str) -> Iterator[str]:
    """A login role with no privilege at all (beyond PUBLIC's)."""
    role = f"bare_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _denied(url: str, statements: list[str]) -> None:
    with psycopg.connect(url) as c:
        for statement in statements:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(statement.encode())
            c.rollback()


def test_app_role_calls_emit_and_no_other_outbox_function(
        db_url: str, roles: tuple[str, str]) -> None:  # noqa: F811
    app, worker = roles
    add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(_as(db_url, app)) as c:
        c.execute(EMIT.encode())
        c.commit()
    _denied(_as(db_url, app), [
        "SELECT outbox.uuid7()",
        "SELECT outbox.check_event('x', NULL, NULL, NULL)",
        "SELECT outbox.schema_problem('{}', '{}', '$', '{}')",
        "SELECT outbox.capture_add('outbox.events', 'x')",
        "SELECT outbox.capture_remove('outbox.events')",
        "SELECT * FROM outbox.captures",
    ])
    _denied(_as(db_url, worker), [EMIT])  # the worker does not emit
    assert count(db_url, "deliveries") == 1


def test_execute_on_emit_alone_emits_but_cannot_touch_the_tables(
        db_url: str, bare_role: str) -> None:
    add_endpoint(db_url, "http://127.0.0.1:9/x")
    _denied(_as(db_url, bare_role), [EMIT])  # not granted: refused
    with psycopg.connect(db_url, autocommit=True) as c:
        who = sql.Identifier(bare_role)
        c.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(SCHEMA), who))
        c.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {}.emit(text, jsonb, text, text, text)"
                          " TO {}").format(sql.Identifier(SCHEMA), who))
    with psycopg.connect(_as(db_url, bare_role)) as c:
        c.execute(EMIT.encode())
        with pytest.raises(psycopg.errors.InvalidParameterValue):  # validation still applies
            c.execute(b"SELECT outbox.emit('bad type', '{}')")
        c.rollback()
        c.execute(EMIT.encode())
        c.commit()
    _denied(_as(db_url, bare_role), [
        "INSERT INTO outbox.events (id, type, payload) VALUES (gen_random_uuid(), 'x', '{}')",
        "INSERT INTO outbox.deliveries (event_id, endpoint_id) VALUES (gen_random_uuid(),"
        " gen_random_uuid())",
        "SELECT id FROM outbox.endpoints",
        "SELECT id FROM outbox.events",
    ])
    assert count(db_url, "events") == 1 and count(db_url, "deliveries") == 1


def test_search_path_is_pinned(db_url: str, roles: tuple[str, str]) -> None:  # noqa: F811
    app, _worker = roles
    add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(_as(db_url, app)) as c:
        # a caller's look-alike tables, first on its search_path, are not what emit writes
        c.execute(b"CREATE TEMP TABLE events (id uuid, type text, payload json, key text,"
                  b" idempotency_key text, traceparent text, tenant text)")
        c.execute(b"CREATE TEMP TABLE deliveries (event_id uuid, endpoint_id uuid, key text,"
                  b" state text)")
        c.execute(b"SET search_path = pg_temp, public")
        c.execute(EMIT.encode())
        assert c.execute(b"SELECT count(*) FROM pg_temp.events").fetchone() == (0,)
        c.commit()
    assert count(db_url, "events") == 1 and count(db_url, "deliveries") == 1
    with psycopg.connect(db_url) as c:
        configs = c.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
            " WHERE p.pronamespace = %s::regnamespace AND p.proname IN"
            " ('emit', 'capture_row', 'capture_add', 'uuid7') ORDER BY 1", (SCHEMA,)).fetchall()
    assert [(n, d) for n, d, _ in configs] == [
        ("capture_add", False), ("capture_row", True), ("emit", True), ("uuid7", False)]
    pinned = {n for n, _, cfg in configs if cfg and f"search_path={SCHEMA}, pg_temp" in cfg}
    # uuid7 names pg_catalog functions only (searched first): no search_path to pin
    assert pinned == {"capture_add", "capture_row", "emit"}


def test_writers_of_a_captured_table_need_no_grant(db_url: str, bare_role: str) -> None:
    add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE public.notes (id int, body text)")
        c.execute("SELECT outbox.capture_add('public.notes', 'note.changed')")
        c.execute(sql.SQL("GRANT INSERT ON public.notes TO {}").format(
            sql.Identifier(bare_role)))
    with psycopg.connect(_as(db_url, bare_role)) as c:
        c.execute(b"INSERT INTO public.notes VALUES (1, 'hello')")
        c.commit()
    assert count(db_url, "events") == 1 and count(db_url, "deliveries") == 1
