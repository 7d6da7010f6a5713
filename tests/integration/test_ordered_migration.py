"""migrations/0005_ordered.sql on a table that already holds rows: no rewrite, the rows
before it keep flowing, and the app and worker keep working."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import outbox
from outbox.admin import migrations as mg
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, drain, settings

TABLES = ("deliveries", "endpoints", "events")


def _files(c: psycopg.Connection[Any]) -> dict[str, int]:
    # once migration 0018 has run, the table is the first partition of deliveries
    # (deliveries_legacy): attached in place, so the same file is proof of no rewrite either
    return {t: int(c.execute("SELECT relfilenode FROM pg_class WHERE oid ="
                             " COALESCE(to_regclass(%s), %s::regclass)",
                             (f"{SCHEMA}.{t}_legacy", f"{SCHEMA}.{t}")
                             ).fetchone()[0])  # type: ignore[index]
            for t in TABLES}


def test_0005_on_a_populated_table_rewrites_nothing(blank_db_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    every = mg.available()
    assert any(m.name == "ordered" for m in every)
    before_0005 = [m for m in every if m.version < 5]
    monkeypatch.setattr(mg, "available", lambda inbox=False: before_0005)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        mg.migrate(c, SCHEMA)
        c.execute(f"INSERT INTO {SCHEMA}.endpoints (id, url, secret)"
                  " VALUES (gen_random_uuid(), 'http://127.0.0.1:9/old', 'x')")
        c.execute(f"INSERT INTO {SCHEMA}.events (id, type, payload, key)"
                  " SELECT gen_random_uuid(), 't', '{}', 'k' FROM generate_series(1, 2000)")
        c.execute(f"INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id)"
                  f" SELECT e.id, p.id FROM {SCHEMA}.events e, {SCHEMA}.endpoints p")
        files = _files(c)
        monkeypatch.undo()
        applied = mg.migrate(c, SCHEMA)
        assert [m.name for m in applied if m.version == 5] == ["ordered"]
        assert _files(c) == files  # catalog-only: no table was rewritten
        check = c.execute("SELECT convalidated FROM pg_constraint"
                          " WHERE conname = 'deliveries_state_check'"
                          f" AND conrelid = '{SCHEMA}.deliveries'::regclass").fetchone()
        assert check == (False,)  # NOT VALID: no scan of the existing rows
        old = c.execute(f"SELECT count(*), count(key), bool_or(p.ordered)"
                        f" FROM {SCHEMA}.deliveries d JOIN {SCHEMA}.endpoints p"
                        f" ON p.id = d.endpoint_id WHERE d.state = 'pending'").fetchone()
        assert old == (2000, 0, False)  # as they were: pending, unordered, keyless
        with pytest.raises(psycopg.errors.CheckViolation):  # the new CHECK is enforced
            c.execute(f"UPDATE {SCHEMA}.deliveries SET state = 'lost'"
                      f" WHERE id = (SELECT min(id) FROM {SCHEMA}.deliveries)")


def test_rows_from_before_and_after_flow(db_url: str) -> None:
    """An endpoint turned ordered keeps its older rows unordered and orders the new ones."""
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [outbox.Event("t", {"n": n}, key="k") for n in range(3)])
        c.commit()
        c.execute(f"UPDATE {SCHEMA}.endpoints SET ordered = true WHERE id = %s", (endpoint,))
        outbox.emit_many(c, [outbox.Event("t", {"n": n}, key="k") for n in range(3)])
        c.commit()
        got = c.execute(f"SELECT state, key FROM {SCHEMA}.deliveries ORDER BY id").fetchall()
    assert got == [("pending", None)] * 3 + [("fresh", "k")] * 3
    stats = drain(settings(db_url))  # nothing listens on port 9: every one retries
    assert stats["claimed"] >= 4  # the 3 old ones and the new key's head, not its queue
    with psycopg.connect(db_url) as c:
        queued = c.execute(f"SELECT count(*) FROM {SCHEMA}.deliveries"
                           " WHERE state = 'waiting'").fetchone()
    assert queued == (2,)


def test_least_privilege_roles_emit_and_deliver_in_order(db_url: str) -> None:
    """migrations/roles.sql: the app role emits to an ordered endpoint (reading its flag,
    COPY and SQL paths), the worker role places, claims and promotes."""
    from outbox.testing.receiver import Receiver
    from tests.integration import test_roles as tr

    fixture = tr.roles.__wrapped__(db_url)  # type: ignore[attr-defined]
    app, worker = next(fixture)
    try:
        with Receiver() as rx:
            add_endpoint(db_url, rx.url + "/w", ordered=True)
            with psycopg.connect(tr._as(db_url, app)) as c:
                outbox.emit_many(c, [outbox.Event("x", {"n": n}, key="k") for n in range(3)])
                outbox.emit(c, outbox.Event("x", {"n": 3}, key="k"))
                c.commit()
            drain(settings(tr._as(db_url, worker)))
            assert rx.wait_for(4, 5)
            seen = [r.body for r in rx.received]
        assert seen == [b'{"n":%d}' % n for n in range(4)]
    finally:
        next(fixture, None)
