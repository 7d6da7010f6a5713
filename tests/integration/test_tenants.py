"""Tenants and type filters: who receives an event, on every emit path; bad scopes refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import outbox
from outbox import Event, InvalidEndpoint, InvalidEvent
from outbox.admin import endpoints as ep
from outbox.admin import migrations as migrate_module
from outbox.admin.migrations import available, migrate
from tests.support.cli import invoke
from tests.support.pg import SCHEMA, count

Emitter = Callable[[psycopg.Connection[Any], list[Event]], list[uuid.UUID]]


def _add(db_url: str, **kwargs: Any) -> uuid.UUID:
    with psycopg.connect(db_url, autocommit=True) as c:
        return ep.add(c, "https://example.com/h", schema=SCHEMA, **kwargs).endpoint.id


def _routes(db_url: str) -> set[tuple[uuid.UUID, uuid.UUID]]:
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT event_id, endpoint_id FROM outbox.deliveries").fetchall()
    return {(e, p) for e, p in rows}


def _one_by_one(conn: psycopg.Connection[Any], events: list[Event]) -> list[uuid.UUID]:
    return [outbox.emit(conn, e) for e in events]


def _many_copy(conn: psycopg.Connection[Any], events: list[Event]) -> list[uuid.UUID]:
    return outbox.emit_many(conn, events)  # no idempotency keys: the COPY path


def _many_keyed(conn: psycopg.Connection[Any], events: list[Event]) -> list[uuid.UUID]:
    keyed = [Event(e.type, e.payload, tenant=e.tenant, idempotency_key=f"k{i}")
             for i, e in enumerate(events)]
    return outbox.emit_many(conn, keyed)  # the INSERT ... unnest path


def _many_keyed_same_key(conn: psycopg.Connection[Any], events: list[Event]
                         ) -> list[uuid.UUID]:
    return outbox.emit_many(conn, events)  # keys as given: the INSERT ... unnest path


def _async_one(conn: psycopg.Connection[Any], events: list[Event]) -> list[uuid.UUID]:
    async def go() -> list[uuid.UUID]:
        async with await psycopg.AsyncConnection.connect(conn.info.dsn) as ac:
            ids = [await outbox.emit_async(ac, e) for e in events[:2]]
            ids += await outbox.emit_many_async(ac, events[2:])
            await ac.commit()
            return ids
    return asyncio.run(go())


@pytest.mark.parametrize("emit", [_one_by_one, _many_copy, _many_keyed, _async_one],
                         ids=["emit", "emit_many-copy", "emit_many-keyed", "async"])
def test_each_event_reaches_its_tenant_and_the_all_tenants_endpoints(
        db_url: str, conn: psycopg.Connection[Any], emit: Emitter) -> None:
    a = _add(db_url, tenant="acme")
    a_invoices = _add(db_url, tenant="acme", event_types=["invoice.*"])
    b = _add(db_url, tenant="globex")
    plain = _add(db_url)
    everyone = _add(db_url, all_tenants=True)
    disabled = _add(db_url, tenant="acme")
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.set_enabled(c, disabled, False, schema=SCHEMA)
    ids = emit(conn, [Event("invoice.paid", {}, tenant="acme"),
                      Event("user.created", {}, tenant="acme"),
                      Event("invoice.paid", {}, tenant="globex"),
                      Event("invoice.paid", {}),
                      Event("invoice.paid", {}, tenant="initech")])
    conn.commit()
    acme_inv, acme_user, globex_inv, none_inv, initech_inv = ids
    assert _routes(db_url) == {
        (acme_inv, a), (acme_inv, a_invoices), (acme_inv, everyone),
        (acme_user, a), (acme_user, everyone),
        (globex_inv, b), (globex_inv, everyone),
        (none_inv, plain), (none_inv, everyone),
        (initech_inv, everyone),
    }


@pytest.mark.parametrize(("filters", "takes", "skips"), [
    (["invoice.*"], ["invoice.paid", "invoice.line.added"], ["invoice", "invoices.paid", "x"]),
    (["*"], ["invoice.paid", "a"], []),
    (["user.created", "invoice.*"], ["user.created", "invoice.void"], ["user.deleted"]),
    (["a:b.*"], ["a:b.c"], ["a:bc", "a:b"]),
])
def test_wildcard_filters(db_url: str, conn: psycopg.Connection[Any], filters: list[str],
                          takes: list[str], skips: list[str]) -> None:
    endpoint = _add(db_url, event_types=filters)
    taken = [outbox.emit(conn, Event(t, {})) for t in takes]
    for t in skips:
        outbox.emit(conn, Event(t, {}))
    conn.commit()
    assert _routes(db_url) == {(e, endpoint) for e in taken}


def test_star_is_stored_as_every_type_and_filters_are_normalised(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        assert ep.add(c, "https://example.com/h", schema=SCHEMA,
                      event_types=["*", "a"]).endpoint.event_types is None
        stored = ep.add(c, "https://example.com/h", schema=SCHEMA,
                        event_types=["b.*", "a", "b.*"]).endpoint.event_types
    assert stored == ["a", "b.*"]


@pytest.mark.parametrize(("tenant", "reason"), [
    ("", "non-empty"), ("t" * 129, "over 128"), ("a\nb", "control"), (42, "non-empty string"),
])
def test_bad_event_tenant_writes_nothing(db_url: str, conn: psycopg.Connection[Any],
                                         tenant: Any, reason: str) -> None:
    _add(db_url, tenant="acme")
    with pytest.raises(InvalidEvent, match=reason):
        outbox.emit(conn, Event("x", {}, tenant=tenant))
    with pytest.raises(InvalidEvent, match=reason):
        outbox.emit_many(conn, [Event("x", {}), Event("x", {}, tenant=tenant)])
    conn.commit()
    assert count(db_url, "events") == 0 and count(db_url, "deliveries") == 0


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"tenant": ""}, "non-empty"),
    ({"tenant": "t" * 129}, "over 128"),
    ({"tenant": "a\tb"}, "control"),
    ({"tenant": "acme", "all_tenants": True}, "not both"),
    ({"event_types": ["invoice*"]}, "malformed"),
    ({"event_types": [".*"]}, "prefix"),
    ({"event_types": ["a b.*"]}, "malformed"),
    ({"event_types": ["invoice.**"]}, "malformed"),
])
def test_bad_endpoint_scope_writes_nothing(db_url: str, kwargs: dict[str, Any],
                                           reason: str) -> None:
    with pytest.raises(InvalidEndpoint, match=reason):
        _add(db_url, **kwargs)
    assert count(db_url, "endpoints") == 0


def test_cli_add_and_list_by_tenant(db_url: str) -> None:
    env = {"OUTBOX_ALLOW_NETWORKS": "0.0.0.0/0"}
    assert invoke(db_url, "endpoints", "add", "https://a.example/h", "--tenant", "acme",
                  env=env).exit_code == 0
    assert invoke(db_url, "endpoints", "add", "https://w.example/h", "--all-tenants",
                  env=env).exit_code == 0
    assert invoke(db_url, "endpoints", "add", "https://p.example/h", env=env).exit_code == 0
    listed = invoke(db_url, "endpoints", "list").output
    assert {line.split()[1] for line in listed.splitlines()[1:] if line.strip()} == {
        "acme", "(all)", "-"}
    only = invoke(db_url, "endpoints", "list", "--tenant", "acme").output
    assert "a.example" in only and "w.example" not in only and "p.example" not in only
    both = invoke(db_url, "endpoints", "add", "https://x.example/h", "--tenant", "acme",
                  "--all-tenants", env=env)
    assert both.exit_code == 1 and "not both" in both.output
    assert count(db_url, "endpoints") == 3


def test_rows_from_before_tenants_keep_working(blank_db_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A database at 0003 with an endpoint, an event and a pending delivery, migrated."""
    before = [m for m in available() if m.version <= 3]
    monkeypatch.setattr(migrate_module, "available",
                        lambda inbox=False: available(inbox=True) if inbox else before)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA)
        c.execute("INSERT INTO outbox.endpoints (id, url, secret, event_types)"
                  " VALUES (%s, 'https://old.example/h', 'whsec_x', '{invoice.paid}')",
                  (uuid.UUID(int=1),))
        c.execute("INSERT INTO outbox.events (id, type, payload) VALUES (%s, 'invoice.paid', '{}')",
                  (uuid.UUID(int=2),))
        c.execute("INSERT INTO outbox.deliveries (event_id, endpoint_id) VALUES (%s, %s)",
                  (uuid.UUID(int=2), uuid.UUID(int=1)))
    monkeypatch.undo()
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        assert [m.version for m in migrate(c, SCHEMA)] == [
            m.version for m in available() if m.version > 3]
        (endpoint,) = ep.list_all(c, schema=SCHEMA)
        assert (endpoint.tenant, endpoint.all_tenants) == (None, False)
        with c.transaction():
            new = outbox.emit(c, Event("invoice.paid", {}), schema=SCHEMA)
        rows = c.execute("SELECT event_id, state FROM outbox.deliveries ORDER BY id").fetchall()
    assert rows == [(uuid.UUID(int=2), "pending"), (new, "pending")]


@pytest.mark.parametrize("emit", [_one_by_one, _many_keyed_same_key],
                         ids=["emit", "emit_many-keyed"])
def test_idempotency_keys_are_per_tenant(db_url: str, conn: psycopg.Connection[Any],
                                         emit: Emitter) -> None:
    a, b = _add(db_url, tenant="acme"), _add(db_url, tenant="globex")
    plain = _add(db_url)
    events = [Event("order.created", {"n": n}, tenant=t, idempotency_key="order-1")
              for n, t in enumerate(["acme", "globex", None, "acme"])]
    ids = emit(conn, events)
    conn.commit()
    acme, globex, none, acme_again = ids
    assert acme_again == acme and len({acme, globex, none}) == 3
    assert _routes(db_url) == {(acme, a), (globex, b), (none, plain)}
    assert count(db_url, "events") == 3


def test_bad_filter_on_update_and_cli_writes_nothing(db_url: str) -> None:
    endpoint = _add(db_url, event_types=["invoice.paid"])
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(InvalidEndpoint, match="'invoice\\*'"):
            ep.update(c, endpoint, schema=SCHEMA, event_types=["invoice*"])
        assert ep.get(c, endpoint, schema=SCHEMA).event_types == ["invoice.paid"]
    env = {"OUTBOX_ALLOW_NETWORKS": "0.0.0.0/0"}
    added = invoke(db_url, "endpoints", "add", "https://a.example/h", "--event-type", "a*",
                   env=env)
    updated = invoke(db_url, "endpoints", "update", str(endpoint), "--event-type", "x.**",
                     env=env)
    assert (added.exit_code, updated.exit_code) == (1, 1), added.output + updated.output
    assert "event-type filter" in added.output and "event-type filter" in updated.output
    assert count(db_url, "endpoints") == 1
    with psycopg.connect(db_url, autocommit=True) as c:
        assert ep.get(c, endpoint, schema=SCHEMA).event_types == ["invoice.paid"]
