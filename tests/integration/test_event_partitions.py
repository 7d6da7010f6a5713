"""Partitioned events (migrations/0025): partitions of event ids made ahead and dropped behind
with their idempotency keys, never while a delivery refers to their events; ids outside
them go to events_default; upgrade in place from a populated 0024 database."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
import uuid

import psycopg
import pytest

import outbox
from outbox.admin import migrations as migrate_module
from outbox.admin import partitions as parts
from outbox.admin.migrations import available, migrate
from outbox.admin.retention import prune
from outbox.testing.receiver import Receiver
from tests.support.cli import invoke
from tests.support.pg import SCHEMA
from tests.support.workers import (
    add_endpoint,
    drain,
    log_of,
    rows,
    settings,
    spawn,
    wait_until,
)

WIDTH = dt.timedelta(seconds=2)


def _advance(db_url: str, width: dt.timedelta = WIDTH) -> int:
    with psycopg.connect(db_url, autocommit=True) as c:
        return parts.advance(c, SCHEMA, width)


def _home(db_url: str, event_id: uuid.UUID) -> str:
    ((name,),) = rows(db_url, "SELECT tableoid::regclass::text FROM outbox.events"
                              " WHERE id = %s", (event_id,))
    return str(name).removeprefix("outbox.")


def _emit(db_url: str, key: str | None = None, event_type: str = "t") -> uuid.UUID:
    with psycopg.connect(db_url) as c:
        got = outbox.emit(c, outbox.Event(event_type, {"k": key}, idempotency_key=key),
                          schema=SCHEMA)
        c.commit()
    return got


def _event_status(db_url: str) -> dict[str, str | None]:
    with psycopg.connect(db_url, autocommit=True) as c:
        return {p.name: p.blocked_by for p in parts.event_status(c, SCHEMA, dt.timedelta(0))}


def test_advance_makes_partitions_ahead_and_emits_land_in_them(db_url: str) -> None:
    before = _emit(db_url)  # no manager has run since the migration: the default partition
    assert _home(db_url, before) == "events_default"
    made = _advance(db_url)
    assert made >= 30  # 2 s wide, at least 60 s ahead (plus the deliveries' own)
    ranges = rows(db_url, "SELECT lo, hi FROM outbox.event_partitions WHERE lo IS NOT NULL"
                          " ORDER BY lo")
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # no gaps
    # a minute past the advance's start (its transaction's now(); making 30 partitions
    # takes a moment of that minute)
    ((ahead,),) = rows(db_url, "SELECT outbox.uuid7_time(%s) - now()", (ranges[-1][1],))
    assert ahead > dt.timedelta(seconds=45), (ahead, len(ranges))
    new = _emit(db_url)
    assert _home(db_url, new).startswith("events_p")
    assert _home(db_url, before) == "events_default"  # below the first partition: stays
    made_again = _advance(db_url)  # only what time moved on to since the first call
    assert made_again <= 3, made_again


def test_a_new_partition_takes_its_rows_out_of_the_default_partition(db_url: str) -> None:
    """An id from a clock running ahead lands in events_default, then in its partition."""
    with psycopg.connect(db_url, autocommit=True) as c:
        (ahead,) = c.execute("INSERT INTO outbox.events (id, type, payload)"
                             " VALUES (outbox.uuid7_floor(now() + interval '30 s'), 't', '{}')"
                             " RETURNING id").fetchone()  # type: ignore[misc]
    assert _home(db_url, ahead) == "events_default"
    _advance(db_url)
    assert _home(db_url, ahead).startswith("events_p")
    assert rows(db_url, "SELECT count(*) FROM outbox.events WHERE id = %s", (ahead,)) == [(1,)]


def test_a_partition_goes_once_no_delivery_refers_to_its_events_and_takes_its_keys(
        db_url: str) -> None:
    _advance(db_url)
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/h")
        first = _emit(db_url, key="order-1")
        assert _emit(db_url, key="order-1") == first  # deduplicated while kept
        home = _home(db_url, first)
        time.sleep(WIDTH.total_seconds() + 0.1)  # its ids now all precede the cutoff
        assert _event_status(db_url)[home] == "deliveries refer to its events"
        with psycopg.connect(db_url, autocommit=True) as c:
            parts.drop_expired(c, SCHEMA, dt.timedelta(0))  # the empty converted one goes
        assert _event_status(db_url)[home] == "deliveries refer to its events"
        drain(settings(db_url))
        assert rx.wait_for(1, 10)
    assert rows(db_url, "SELECT count(*) FROM outbox.events WHERE id = %s", (first,)) == [(1,)]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("DELETE FROM outbox.deliveries")  # as the deliveries' own drop does
        result = parts.drop_expired(c, SCHEMA, dt.timedelta(0))
    assert result.events_dropped >= 1
    assert home not in _event_status(db_url)
    assert rows(db_url, "SELECT count(*) FROM outbox.events WHERE id = %s", (first,)) == [(0,)]
    assert rows(db_url, "SELECT count(*) FROM outbox.event_keys") == [(0,)]
    assert _emit(db_url, key="order-1") != first  # the key went with its event
    assert "within retention" in _event_status(db_url).values()  # the newer ones stay


def test_pruning_an_event_row_by_row_deletes_its_key(db_url: str) -> None:
    keyed = _emit(db_url, key="k-1")  # in events_default: pruned row by row
    assert _home(db_url, keyed) == "events_default"
    time.sleep(0.01)
    with psycopg.connect(db_url, autocommit=True) as c:
        assert prune(c, SCHEMA, dt.timedelta(0)).events == 1
    assert rows(db_url, "SELECT count(*) FROM outbox.event_keys") == [(0,)]
    assert _emit(db_url, key="k-1") != keyed


def _at_0024(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``url`` migrated as the release before 0025; ``available`` stays patched so, until
    ``monkeypatch.undo()``, nothing newer is applied."""
    before = [m for m in available() if m.version <= 24]
    monkeypatch.setattr(migrate_module, "available",
                        lambda inbox=False: available(inbox=True) if inbox else before)
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c, SCHEMA)


def test_upgrade_in_place_keeps_every_event_and_key(
        blank_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _at_0024(blank_db_url, monkeypatch)
    with Receiver() as rx:
        add_endpoint(blank_db_url, rx.url + "/h")
        with psycopg.connect(blank_db_url) as c:
            c.execute("SELECT outbox.emit('plain', jsonb_build_object('n', n))"
                      " FROM generate_series(0, 9) n")
            (keyed,) = c.execute("SELECT outbox.emit('keyed', '{}', idempotency_key => 'k')"
                                 ).fetchone()  # type: ignore[misc]
            c.commit()
        snapshot = rows(blank_db_url, "SELECT * FROM outbox.events ORDER BY id")
        monkeypatch.undo()
        with psycopg.connect(blank_db_url, autocommit=True) as c:
            applied = [m.version for m in migrate(c, SCHEMA)]
        assert applied == [m.version for m in available() if m.version > 24]
        assert rows(blank_db_url, "SELECT * FROM outbox.events ORDER BY id") == snapshot
        assert rows(blank_db_url, "SELECT DISTINCT tableoid::regclass::text FROM outbox.events"
                    ) == [("outbox.events_legacy",)]
        # the key still deduplicates, from Python and from SQL
        assert _emit(blank_db_url, key="k", event_type="keyed") == keyed
        assert rows(blank_db_url, "SELECT outbox.emit('keyed', '{}', idempotency_key => 'k')"
                    ) == [(keyed,)]
        drain(settings(blank_db_url))
        assert rx.wait_for(11, 15)
    # the converted table goes whole once nothing refers to its events
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute("DELETE FROM outbox.deliveries")
        assert parts.drop_expired(c, SCHEMA, dt.timedelta(0)).events_dropped == 1
    assert rows(blank_db_url, "SELECT count(*) FROM outbox.events") == [(0,)]
    assert rows(blank_db_url, "SELECT count(*) FROM outbox.event_keys") == [(0,)]


def test_the_cli_lists_the_partitions_of_events(db_url: str) -> None:
    _advance(db_url)
    out = invoke(db_url, "partitions", "--events", "--older-than", "0s", "--json")
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    assert listed[0]["name"] == "events_legacy" and listed[0]["lo"] is None
    assert listed[0]["droppable"] is True  # empty, and every id below the cutoff
    assert {p["blocked_by"] for p in listed[1:]} == {"within retention"}
    table = invoke(db_url, "partitions", "--events").output
    assert "events_legacy" in table and "no: within retention" in table


def test_a_worker_makes_event_partitions_ahead_and_drops_them_behind(db_url: str) -> None:
    """OUTBOX_PARTITION_SECONDS=10, a retention of 1 s: the worker makes the partitions of
    events ahead, every emit lands in one, and once their deliveries' partitions are gone
    the worker drops them whole (no event is deleted row by row)."""
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/h")
        proc = spawn(db_url, OUTBOX_PARTITION_SECONDS="10", OUTBOX_RETENTION_SECONDS="1",
                     OUTBOX_PRUNE_INTERVAL_SECONDS="1", OUTBOX_POLL_INTERVAL_SECONDS="0.05")
        try:
            try:
                wait_until(lambda: rows(db_url, "SELECT count(*) FROM outbox.event_partitions"
                                                " WHERE lo IS NOT NULL")[0][0] >= 6,
                           15, "partitions of events made 60 s ahead")
            except AssertionError as exc:
                raise AssertionError(log_of(proc)) from exc
            homes = {_home(db_url, _emit(db_url)) for _ in range(3)}
            assert all(h.startswith("events_p") for h in homes), homes
            wait_until(lambda: not rows(db_url, "SELECT 1 FROM outbox.event_partitions"
                                                " WHERE name = ANY (%s)", (list(homes),)),
                       60, "the partitions of delivered events dropped")
            assert rx.wait_for(3, 5)
        finally:
            proc.terminate()
            proc.wait(15)
        assert "Traceback" not in log_of(proc), log_of(proc)
    assert rows(db_url, "SELECT count(*) FROM outbox.events WHERE tableoid ="
                        " 'outbox.events_default'::regclass") == [(0,)]


def test_upgrade_uses_a_bound_validated_beforehand(
        blank_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The migration's comment: a CHECK validated before the migration spares it the scan."""
    _at_0024(blank_db_url, monkeypatch)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute("SELECT outbox.emit('plain', '{}')")
        (bound,) = c.execute(
            "SELECT (lpad(to_hex((extract(epoch FROM now() + interval '10 minutes') * 1000)"
            "::bigint), 12, '0') || '00000000000000000000')::uuid").fetchone()  # type: ignore[misc]
        c.execute(f"ALTER TABLE outbox.events ADD CONSTRAINT events_legacy_bound"
                  f" CHECK (id < '{bound}') NOT VALID".encode())
        c.execute("ALTER TABLE outbox.events VALIDATE CONSTRAINT events_legacy_bound")
    monkeypatch.undo()
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA)
    assert rows(blank_db_url, "SELECT lo, hi FROM outbox.event_partitions") == [(None, bound)]
    new = _emit(blank_db_url)
    assert _home(blank_db_url, new) == "events_legacy"  # below B


def test_upgrade_with_ids_that_are_no_uuid7_keeps_one_table_for_every_event(
        blank_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An id whose first 48 bits are near their end (written by hand, not by emit): no bound
    above it exists, so the converted table takes every id and is pruned row by row."""
    _at_0024(blank_db_url, monkeypatch)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        c.execute("INSERT INTO outbox.events (id, type, payload)"
                  " VALUES ('ffffffff-ffff-4fff-bfff-ffffffffffff', 't', '{}')")
    monkeypatch.undo()
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA)
        assert parts.advance(c, SCHEMA, WIDTH) >= 0  # makes no partition of events
    assert rows(blank_db_url, "SELECT name FROM outbox.event_partitions") == [("events_legacy",)]
    assert _home(blank_db_url, _emit(blank_db_url)) == "events_legacy"
    assert _event_status(blank_db_url) == {"events_legacy": "within retention"}
