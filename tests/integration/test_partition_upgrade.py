"""Upgrade in place (migration 0018) from a populated database of the previous release, and
a full create-ahead / drop-behind cycle run by a real worker process."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import psycopg
import pytest

import outbox
from outbox.admin import migrations as migrate_module
from outbox.admin.migrations import available, migrate
from outbox.testing.receiver import Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, drain, log_of, rows, settings, spawn

SNAPSHOT = ("SELECT id, event_id, endpoint_id, state, attempts, key, last_error"
            " FROM outbox.deliveries ORDER BY id")


def _populate(url: str, plain: uuid.UUID, ordered: uuid.UUID) -> None:
    """At 0013: 40 events to a plain endpoint (10 delivered with an attempt row, 5 dead,
    5 retrying, 20 pending) and keyed events to an ordered one (key a: a pending head and
    3 waiting behind it; key b: 3 fresh), as workers of that release leave them. Emitted by
    that release's own SQL emit (migrations/0011, as of 0013): today's Python emit routes
    with columns the old schema does not have yet."""
    with psycopg.connect(url) as c:
        c.execute("SELECT outbox.emit('plain', jsonb_build_object('n', n))"
                  " FROM generate_series(0, 39) n")
        for k, count in (("a", 4), ("b", 3)):
            for n in range(count):
                c.execute("SELECT outbox.emit('keyed', %s::jsonb, key => %s)",
                          (json.dumps({"key": k, "n": n}), k))
        c.commit()
    with psycopg.connect(url, autocommit=True) as c:
        ids = [i for (i,) in c.execute("SELECT id FROM outbox.deliveries WHERE endpoint_id = %s"
                                       " ORDER BY id", (plain,))]
        c.execute("UPDATE outbox.deliveries SET state = 'delivered', attempts = 1,"
                  " finished_at = now(), last_status = 200 WHERE id = ANY (%s)", (ids[:10],))
        c.execute("UPDATE outbox.deliveries SET state = 'dead', attempts = 5,"
                  " finished_at = now(), last_error = 'gone' WHERE id = ANY (%s)", (ids[10:15],))
        c.execute("UPDATE outbox.deliveries SET attempts = 2, last_error = 'HTTP 503'"
                  " WHERE id = ANY (%s)", (ids[15:20],))
        c.execute("INSERT INTO outbox.delivery_attempts (delivery_id, attempt, outcome)"
                  " SELECT id, 1, CASE state WHEN 'dead' THEN 'dead' WHEN 'delivered'"
                  " THEN 'delivered' ELSE 'retry' END FROM outbox.deliveries"
                  " WHERE attempts > 0")
        a = [i for (i,) in c.execute("SELECT id FROM outbox.deliveries WHERE key = 'a'"
                                     " ORDER BY id")]
        c.execute("UPDATE outbox.deliveries SET state = 'pending' WHERE id = %s", (a[0],))
        c.execute("UPDATE outbox.deliveries SET state = 'waiting' WHERE id = ANY (%s)", (a[1:],))
    assert {s: n for s, n in rows(url, "SELECT state, count(*) FROM outbox.deliveries"
                                       " GROUP BY 1")} == {
        "delivered": 10, "dead": 5, "pending": 26, "waiting": 3, "fresh": 3}


def _old_endpoint(url: str, target: str, event_type: str, ordered: bool = False) -> uuid.UUID:
    """An endpoint as the 0013 release registers it (today's ``endpoints.add`` writes
    columns that schema does not have)."""
    endpoint = uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("INSERT INTO outbox.endpoints (id, url, secret, event_types, ordered)"
                  " VALUES (%s, %s, %s, %s, %s)",
                  (endpoint, target, SECRET, [event_type], ordered))
    return endpoint


def test_upgrade_in_place_loses_nothing_and_delivers_every_pending_row(
        blank_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = [m for m in available() if m.version <= 13]
    monkeypatch.setattr(migrate_module, "available",
                        lambda inbox=False: available(inbox=True) if inbox else before)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA)
    with Receiver() as rx:
        plain = _old_endpoint(blank_db_url, rx.url + "/plain", "plain")
        ordered = _old_endpoint(blank_db_url, rx.url + "/ordered", "keyed", ordered=True)
        _populate(blank_db_url, plain, ordered)
        snapshot = rows(blank_db_url, SNAPSHOT)
        attempts = rows(blank_db_url, "SELECT * FROM outbox.delivery_attempts ORDER BY id")
        monkeypatch.undo()
        with psycopg.connect(blank_db_url, autocommit=True) as c:
            applied = [m.version for m in migrate(c, SCHEMA)]
        assert applied == [m.version for m in available() if m.version > 13]
        # nothing lost, nothing changed, nothing copied: the old table is the first partition
        assert rows(blank_db_url, SNAPSHOT) == snapshot
        assert rows(blank_db_url, "SELECT * FROM outbox.delivery_attempts ORDER BY id"
                    ) == attempts
        assert rows(blank_db_url, "SELECT DISTINCT tableoid::regclass::text"
                                  " FROM outbox.deliveries") == [("outbox.deliveries_legacy",)]
        # every pending row (retrying and ordered ones too) is delivered by a worker
        with psycopg.connect(blank_db_url) as c:
            new = outbox.emit(c, outbox.Event("plain", {"n": "new"}), schema=SCHEMA)
            c.commit()
        drain(settings(blank_db_url))
        assert rx.wait_for(25 + 7 + 1, 15)
        bodies = [json.loads(r.body) for r in rx.received if r.path == "/ordered"]
    assert [b["n"] for b in bodies if b["key"] == "a"] == [0, 1, 2, 3]
    assert [b["n"] for b in bodies if b["key"] == "b"] == [0, 1, 2]
    assert {s: n for s, n in rows(blank_db_url, "SELECT state, count(*) FROM outbox.deliveries"
                                                " GROUP BY 1")} == {"delivered": 43, "dead": 5}
    ((part,),) = rows(blank_db_url, "SELECT tableoid::regclass::text FROM outbox.deliveries d"
                                    " WHERE event_id = %s", (new,))
    assert part == "outbox.deliveries_p1"
    # the old table goes whole once its dead rows are past their retention
    out = rows(blank_db_url, "SELECT blocked_by FROM outbox.partition_status(now(), NULL)"
                             " WHERE deliveries = 'deliveries_legacy'")
    assert out == [("dead deliveries kept for replay",)]
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        dropped = c.execute("SELECT outbox.partition_drop(k, now(), now(), 1000)"
                            " FROM outbox.delivery_partitions"
                            " WHERE deliveries = 'deliveries_legacy'").fetchone()
    assert dropped == (True,)
    assert rows(blank_db_url, "SELECT count(*) FROM outbox.deliveries") == [(1,)]
    assert rows(blank_db_url, "SELECT count(*) FROM outbox.delivery_attempts"
                              " WHERE delivery_id < 4294967296") == [(0,)]


def _partitions(url: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT k, opened_at IS NOT NULL, closed_at IS NOT NULL"
                     " FROM outbox.delivery_partitions ORDER BY k")


def test_a_worker_creates_ahead_and_drops_behind_with_10s_partitions(db_url: str) -> None:
    """OUTBOX_PARTITION_SECONDS=10, a retention of 1 s: within a minute the worker opens
    new partitions, keeps one ahead, and drops the ones it has delivered everything of."""
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/h")
        proc = spawn(db_url, OUTBOX_PARTITION_SECONDS="10", OUTBOX_RETENTION_SECONDS="1",
                     OUTBOX_POLL_INTERVAL_SECONDS="0.05")
        try:
            sent = 0
            deadline = time.monotonic() + 55
            while time.monotonic() < deadline:
                with psycopg.connect(db_url) as c:
                    outbox.emit(c, outbox.Event("t", {"n": sent}), schema=SCHEMA)
                    c.commit()
                sent += 1
                parts = _partitions(db_url)
                if parts[0][0] >= 3:  # legacy, p1 and p2 dropped
                    break
                time.sleep(0.25)
            assert parts[0][0] >= 3, (parts, log_of(proc))
            opened = [k for k, is_open, closed in parts if is_open and not closed]
            ahead = [k for k, is_open, _closed in parts if not is_open]
            assert len(opened) == 1 and ahead == [opened[0] + 1], parts
            assert rx.wait_for(sent, 10)
        finally:
            proc.terminate()
            proc.wait(15)
    assert rows(db_url, "SELECT count(*) FROM outbox.deliveries WHERE state <> 'delivered'"
                ) == [(0,)]
