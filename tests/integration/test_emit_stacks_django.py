"""outbox.contrib.django.emit in a real Django project, on Django's psycopg 3 and psycopg2
backends, against a real PostgreSQL.

The project is tests/django_project (settings, an ``Order`` model and its migration, the
README's view); each test migrates a fresh database with ``manage.py migrate`` and runs its
scenario with ``manage.py emit_scenarios`` in a process of its own (Django is configured
once per process, and its psycopg2 backend needs a process where it loaded first). The
scenarios report what they saw; the assertions, and the database checks, are here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.pg import SCHEMA, count
from tests.support.workers import add_endpoint, rows

PROJECT = Path(__file__).resolve().parents[1] / "django_project"


def manage(url: str, driver: str, *args: str) -> str:
    env = {**os.environ, "OUTBOX_TEST_DJANGO_URL": url, "OUTBOX_TEST_DJANGO_DRIVER": driver,
           "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA}
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(params=["psycopg", "psycopg2"])
def project(request: pytest.FixtureRequest, db_url: str) -> tuple[str, str]:
    """(database url, driver): the outbox schema from the template, the shop's tables from
    ``manage.py migrate``."""
    driver: str = request.param
    manage(db_url, driver, "migrate", "--no-input")
    return db_url, driver


def scenario(project: tuple[str, str], name: str) -> Any:
    return json.loads(manage(*project, "emit_scenarios", name))[name]


def orders(url: str) -> int:
    return int(rows(url, "SELECT count(*) FROM shop_order")[0][0])


def test_backend_runs_on_the_driver_asked_for(project: tuple[str, str]) -> None:
    module = scenario(project, "driver")["module"]
    assert module.split(".")[0] == project[1]


def test_commit_writes_order_event_and_deliveries(project: tuple[str, str]) -> None:
    url = project[0]
    endpoint = add_endpoint(url, "https://example.com/all")
    ids = [uuid.UUID(i) for i in scenario(project, "commit")["ids"]]
    assert orders(url) == 1
    stored = dict(rows(url, "SELECT id, payload::text FROM outbox.events"))
    assert [stored[i] for i in ids] == [
        '{"order":1,"note":"50% off"}', '{"i":0}', '{"i":1}', '{"i":2}']
    assert sorted(rows(url, "SELECT event_id, endpoint_id FROM outbox.deliveries")) == sorted(
        (i, endpoint) for i in ids)


def test_rollback_leaves_no_trace(project: tuple[str, str]) -> None:
    url = project[0]
    add_endpoint(url, "https://example.com/all")
    scenario(project, "rollback")
    assert (count(url, "events"), count(url, "deliveries"), orders(url)) == (0, 0, 0)


def test_rolled_back_nested_atomic_takes_its_events(project: tuple[str, str]) -> None:
    url = project[0]
    add_endpoint(url, "https://example.com/all")
    seen = scenario(project, "savepoint")
    assert len(seen["gone"]) == 3
    kept = [uuid.UUID(i) for i in seen["kept"]]
    assert sorted(r[0] for r in rows(url, "SELECT id FROM outbox.events")) == sorted(kept)
    assert sorted(r[0] for r in rows(url, "SELECT event_id FROM outbox.deliveries")) == sorted(
        kept)
    assert orders(url) == 0


def test_outside_atomic_is_refused(project: tuple[str, str]) -> None:
    """Also: a database that is not PostgreSQL is a TypeError."""
    add_endpoint(project[0], "https://example.com/all")
    seen = scenario(project, "autocommit")
    assert seen == {"emit": "NotInTransaction", "emit_many": "NotInTransaction",
                    "sqlite": "TypeError"}
    assert count(project[0], "events") == 0


def test_invalid_event_is_refused_before_any_sql(project: tuple[str, str]) -> None:
    """The scenario's schema does not exist: any SQL would raise SchemaMissing."""
    assert scenario(project, "invalid")["outcomes"] == ["InvalidEvent"] * 4
    assert count(project[0], "events") == 1  # the valid emit after them, committed


def test_failed_transaction_is_refused(project: tuple[str, str]) -> None:
    assert scenario(project, "failed") == {"emit": "NotInTransaction"}
    assert count(project[0], "events") == 0


def test_idempotency_keys_dedupe(project: tuple[str, str]) -> None:
    first, same, batch0, batch1, batch2 = scenario(project, "idempotency")["ids"]
    assert first == same == batch0
    assert batch1 == batch2 != first
    assert count(project[0], "events") == 2


def test_single_emits_are_prepared(project: tuple[str, str]) -> None:
    """OUTBOX_PREPARE_THRESHOLD=0: prepared on first use on Django's connection too."""
    seen = scenario(project, "prepared")
    assert seen["prepared"] == 2  # the plain and the idempotent statement
    assert len(set(seen["ids"])) == 3 and len(set(seen["keyed"])) == 1
    assert count(project[0], "events") == 4


def test_the_projects_outbox_settings_are_obeyed(project: tuple[str, str]) -> None:
    """OUTBOX_MAX_PAYLOAD_BYTES = 4096 in the project's settings (the environment has none);
    override_settings changes it for the block, and only there."""
    seen = scenario(project, "project_settings")
    assert seen == {"refused": "InvalidEvent", "overridden": "ok", "again": "InvalidEvent"}
    assert count(project[0], "events") == 1


def test_server_side_binding_is_not_given_sql_prepare(db_url: str) -> None:
    """OPTIONS={"server_side_binding": True}: Django's ServerBindingCursor sends parameters
    apart from the statement (PostgreSQL refuses ``EXECUTE name ($1, ...)``), and psycopg 3
    prepares such statements by itself: outbox runs them as they are, at any threshold,
    across atomic blocks, and never PREPAREs."""
    manage(db_url, "psycopg-server", "migrate", "--no-input")
    add_endpoint(db_url, "https://example.com/all")
    seen = scenario((db_url, "psycopg-server"), "server_binding")
    assert seen["cursor"].endswith("ServerBindingCursor")
    assert seen["outbox_prepared"] == 0
    assert len(seen["ids"]) == 3 * 10 and len(set(seen["ids"])) == 30
    assert (count(db_url, "events"), count(db_url, "deliveries"), orders(db_url)) == (30, 30, 3)
