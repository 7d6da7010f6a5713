"""`outbox prune` / outbox.admin.retention.prune: deletes exactly what is past retention."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import psycopg
import pytest

from outbox.admin import retention
from outbox.errors import OperationRefused
from tests.support.cli import delivery_ids, execute, invoke, kill, old_uuid7, snapshot
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, emit

DAY = dt.timedelta(days=1)


def _old_event(db_url: str, age: dt.timedelta, *, created_age: dt.timedelta | None = None,
               endpoint: uuid.UUID | None = None, state: str | None = None,
               finished_age: dt.timedelta | None = None) -> uuid.UUID:
    """An event made ``age`` ago (id and created_at), optionally with one delivery."""
    now = dt.datetime.now(dt.UTC)
    event_id = old_uuid7(now - age)
    execute(db_url, f"INSERT INTO {SCHEMA}.events (id, type, payload, created_at)"
                    " VALUES (%s, 'old.event', '{}', %s)",
            (event_id, now - (created_age if created_age is not None else age)))
    if endpoint is not None:
        execute(db_url, f"INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id, state,"
                        " created_at, finished_at) VALUES (%s, %s, %s, %s, %s)",
                (event_id, endpoint, state, now - age,
                 None if finished_age is None else now - finished_age))
        (did,) = delivery_ids(db_url, "event_id = %s", (event_id,))
        execute(db_url, f"INSERT INTO {SCHEMA}.delivery_attempts (delivery_id, attempt,"
                        " outcome) VALUES (%s, 1, 'x'), (%s, 2, 'y')", (did, did))
    return event_id


def _events(db_url: str) -> set[uuid.UUID]:
    return {r[0] for r in execute(db_url, f"SELECT id FROM {SCHEMA}.events")}


@pytest.fixture
def history(db_url: str) -> dict[str, uuid.UUID]:
    ep = add_endpoint(db_url, "http://127.0.0.1:9/x")
    names = {
        "delivered_old": _old_event(db_url, 10 * DAY, endpoint=ep, state="delivered",
                                    finished_age=9 * DAY),
        "delivered_recent_finish": _old_event(db_url, 10 * DAY, endpoint=ep,
                                              state="delivered", finished_age=DAY),
        "dead_old": _old_event(db_url, 10 * DAY, endpoint=ep, state="dead",
                               finished_age=8 * DAY),
        "pending_old": _old_event(db_url, 30 * DAY, endpoint=ep, state="pending"),
        "orphan_old": _old_event(db_url, 8 * DAY),
        "orphan_recent": _old_event(db_url, DAY),
        # the app host's clock ran 10 days slow: its id looks old, the database says new
        "slow_clock": _old_event(db_url, 10 * DAY, created_age=DAY),
    }
    emit(db_url, 3)  # current traffic: pending deliveries
    return names


def test_prune_deletes_only_what_is_past_retention(db_url: str,
                                                   history: dict[str, uuid.UUID]) -> None:
    done = invoke(db_url, "prune", "--older-than", "7d", "--batch-size", "1", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert (result["deliveries"], result["attempts"], result["events"]) == (1, 2, 2)
    left = _events(db_url)
    assert history["delivered_old"] not in left and history["orphan_old"] not in left
    for kept in ("delivered_recent_finish", "dead_old", "pending_old", "orphan_recent",
                 "slow_clock"):
        assert history[kept] in left, kept
    assert len(left) == 5 + 3
    assert execute(db_url, f"SELECT state, count(*) FROM {SCHEMA}.deliveries GROUP BY 1"
                           " ORDER BY 1") == [("dead", 1), ("delivered", 1), ("pending", 4)]
    orphans = execute(db_url, f"SELECT count(*) FROM {SCHEMA}.delivery_attempts a WHERE NOT"
                              f" EXISTS (SELECT 1 FROM {SCHEMA}.deliveries d"
                              " WHERE d.id = a.delivery_id)")
    assert orphans == [(0,)]
    again = json.loads(invoke(db_url, "prune", "--older-than", "7d", "--json").stdout)
    assert (again["deliveries"], again["events"]) == (0, 0)


def test_prune_dead_too(db_url: str, history: dict[str, uuid.UUID]) -> None:
    done = invoke(db_url, "prune", "--older-than", "7d", "--dead-too")
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("deleted 2 deliveries, 4 attempt-log rows and 3 events")
    left = _events(db_url)
    assert history["dead_old"] not in left and history["pending_old"] in left


def test_prune_in_batches_reports_progress(db_url: str) -> None:
    add_endpoint(db_url, "http://127.0.0.1:9/x")
    emit(db_url, 25)
    ids = delivery_ids(db_url)
    execute(db_url, f"UPDATE {SCHEMA}.deliveries SET state = 'delivered',"
                    " finished_at = now() - interval '2 days'")
    kill(db_url, ids[:5], ago=3 * DAY)
    calls: list[tuple[str, int, int | None]] = []
    with psycopg.connect(db_url, autocommit=True) as conn:
        result = retention.prune(conn, SCHEMA, DAY, dead_too=True, batch_size=10,
                                 progress=lambda *a: calls.append(a))
    assert (result.deliveries, result.events) == (25, 0)  # events are younger than a day
    assert [c for c in calls if c[0] == "deliveries"] == [
        ("deliveries", 10, 25), ("deliveries", 20, 25), ("deliveries", 25, 25)]
    assert execute(db_url, f"SELECT count(*) FROM {SCHEMA}.delivery_attempts") == [(0,)]


def test_prune_refuses_to_run_inside_a_transaction(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("SELECT 1")
        with pytest.raises(OperationRefused):
            retention.prune(conn, SCHEMA, DAY)


def test_uuid7_floor_orders_below_every_later_id() -> None:
    when = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    floor = retention.uuid7_floor(when)
    assert old_uuid7(when - dt.timedelta(milliseconds=1)) < floor
    assert old_uuid7(when) >= floor
    assert old_uuid7(when + dt.timedelta(seconds=1)) > floor


@pytest.mark.parametrize(("args", "message"), [
    ([], "Missing option '--older-than'"), (["--older-than", "-7d"], "negative"),
    (["--older-than", "10s"], "shorter than 1m"), (["--older-than", "week"], "not a duration"),
    (["--older-than", "7d", "--batch-size", "0"], "0")])
def test_prune_bad_arguments_change_nothing(db_url: str, history: dict[str, uuid.UUID],
                                            args: list[str], message: str) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, "prune", *args)
    assert done.exit_code == 2, done.output
    assert message in done.stderr
    assert snapshot(db_url) == before
