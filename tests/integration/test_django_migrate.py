"""``manage.py migrate`` of a real Django project (tests/django_app_migrate/) with
``outbox.contrib.django`` installed: it creates, recognises and upgrades the outbox schema
from outbox's SQL files, under outbox's advisory lock, on the psycopg 3 and psycopg2
backends.

Each command runs ``manage.py`` in a subprocess, as a developer would: Django's settings are
per process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox.admin.migrations import available, migrate
from tests.support.pg import outbox_migrations
from tests.support.workers import rows, wait_until

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "tests" / "django_app_migrate" / "manage.py"
ALL = [m.version for m in available()]
DRIVERS = ["psycopg", "psycopg2"]


def manage(db_url: str, *args: str, driver: str = "psycopg", check: bool = True,
           **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("OUTBOX_", "TEST_DJANGO_", "DJANGO_"))}
    environ |= {"TEST_DJANGO_DB_URL": db_url, "TEST_DJANGO_DRIVER": driver, **env}
    proc = subprocess.run([sys.executable, str(MANAGE), *args], capture_output=True,
                          text=True, env=environ, cwd=ROOT, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def django_recorded(url: str, app: str = "outbox") -> list[str]:
    return [r[0] for r in rows(url, "SELECT name FROM django_migrations WHERE app = %s",
                               (app,))]


def relations(url: str, schema: str) -> set[str]:
    return {r[0] for r in rows(url, "SELECT c.relname FROM pg_class c JOIN pg_namespace n"
                                    " ON n.oid = c.relnamespace WHERE n.nspname = %s"
                                    # 'p': a partitioned table (deliveries: migration 0018)
                                    " AND c.relkind IN ('r', 'v', 'p')", (schema,))}


@pytest.mark.parametrize("driver", DRIVERS)
def test_migrate_creates_outbox_and_app_schema(blank_db_url: str, driver: str) -> None:
    shell = manage(blank_db_url, "shell", "-c", "from django.db import connection; "
                   "connection.ensure_connection(); print(type(connection.connection).__module__)",
                   driver=driver)
    assert shell.stdout.split()[-1].split(".")[0] == driver  # the backend under test
    out = manage(blank_db_url, "migrate", driver=driver).stdout
    assert "Applying outbox.0001_initial... OK" in out
    assert [r[0] for r in outbox_migrations(blank_db_url)] == ALL
    assert {"events", "deliveries", "endpoints"} <= relations(blank_db_url, "outbox")
    assert {"shop_order", "shop_paid_events"} <= relations(blank_db_url, "public")
    assert django_recorded(blank_db_url) == ["0001_initial"]
    before = outbox_migrations(blank_db_url)

    again = manage(blank_db_url, "migrate", driver=driver).stdout
    assert "No migrations to apply." in again
    assert "outbox SQL migration" not in again
    assert outbox_migrations(blank_db_url) == before  # nothing re-applied
    assert django_recorded(blank_db_url) == ["0001_initial"]


def test_schema_from_outbox_migrate_is_recognised(db_url: str) -> None:
    before = outbox_migrations(db_url)  # db_url: migrated by outbox.admin.migrations.migrate
    assert [r[0] for r in before] == ALL
    manage(db_url, "migrate")
    assert outbox_migrations(db_url) == before
    assert django_recorded(db_url) == ["0001_initial"]
    assert "shop_paid_events" in relations(db_url, "public")


@pytest.mark.parametrize("driver", DRIVERS)
def test_later_outbox_release_applied_by_plain_migrate(
        blank_db_url: str, driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A project migrated with an older outbox (fewer SQL files, outbox.0001 recorded) gets
    the new files from `manage.py migrate` alone: no new Django migration file."""
    manage(blank_db_url, "migrate", "contenttypes", driver=driver)
    older = available()[:3]
    monkeypatch.setattr("outbox.admin.migrations.available", lambda *, inbox=False: older)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, "outbox")
        c.execute("INSERT INTO django_migrations (app, name, applied)"
                  " VALUES ('outbox', '0001_initial', now())")
    monkeypatch.undo()
    assert [r[0] for r in outbox_migrations(blank_db_url)] == ALL[:3]

    out = manage(blank_db_url, "migrate", driver=driver).stdout
    assert "Applying outbox.0001_initial" not in out
    newer = available()[3:]
    for m in newer:
        assert f"Applied outbox SQL migration {m.version:04d}_{m.name}" in out
    assert [r[0] for r in outbox_migrations(blank_db_url)] == ALL
    assert "outbox SQL migration" not in manage(blank_db_url, "migrate", driver=driver).stdout


def test_not_migrated_database_is_left_alone_by_other_apps_migrate(blank_db_url: str) -> None:
    manage(blank_db_url, "migrate", "contenttypes")
    assert relations(blank_db_url, "outbox") == set()


def test_waits_for_the_outbox_migrate_lock(blank_db_url: str) -> None:
    """manage.py migrate takes the advisory lock `outbox migrate` takes (same schema)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TEST_DJ"))}
    env |= {"TEST_DJANGO_DB_URL": blank_db_url}
    with psycopg.connect(blank_db_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('outbox.admin.migrations'),"
                       " hashtext('outbox'))")
        proc = subprocess.Popen([sys.executable, str(MANAGE), "migrate"], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_until(lambda: rows(blank_db_url, "SELECT count(*) FROM pg_locks WHERE"
                                    " locktype = 'advisory' AND NOT granted")[0][0] == 1,
                       60, "manage.py migrate to wait for the advisory lock")
            assert relations(blank_db_url, "outbox") == set()
        finally:
            holder.rollback()
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert [r[0] for r in outbox_migrations(blank_db_url)] == ALL


def test_failure_records_nothing(db_url: str) -> None:
    query_ = "UPDATE outbox.schema_migrations SET checksum = 'x' WHERE version = 1"
    with psycopg.connect(db_url) as c:
        c.execute(query_)
    proc = manage(db_url, "migrate", check=False)
    assert proc.returncode != 0
    assert "migration 0001_initial changed after it was applied" in proc.stderr
    assert django_recorded(db_url) == []


def test_custom_schema_from_django_settings(blank_db_url: str) -> None:
    manage(blank_db_url, "migrate", "outbox",
           TEST_DJANGO_OUTBOX=json.dumps({"SCHEMA": "webhooks"}))
    assert [r[0] for r in outbox_migrations(blank_db_url, "webhooks")] == ALL
    assert relations(blank_db_url, "outbox") == set()


def _shown(db_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return manage(db_url, "shell", "-c",
                  "from outbox.contrib.django.settings import outbox_settings; "
                  "s = outbox_settings(); print(s.schema_name, s.max_payload_bytes)",
                  check=False, **env)


def test_settings_precedence(blank_db_url: str) -> None:
    assert _shown(blank_db_url).stdout.split()[-2:] == ["outbox", "1048576"]
    env = {"OUTBOX_SCHEMA": "from_env", "OUTBOX_MAX_PAYLOAD_BYTES": "10"}
    assert _shown(blank_db_url, **env).stdout.split()[-2:] == ["from_env", "10"]
    env["TEST_DJANGO_OUTBOX_SCHEMA"] = "from_setting"
    assert _shown(blank_db_url, **env).stdout.split()[-2:] == ["from_setting", "10"]
    env["TEST_DJANGO_OUTBOX"] = json.dumps({"SCHEMA": "from_dict", "MAX_PAYLOAD_BYTES": 20})
    assert _shown(blank_db_url, **env).stdout.split()[-2:] == ["from_dict", "20"]


@pytest.mark.parametrize(
    ("outbox", "reason"),
    [
        ({"SCHEMAS": "x"}, r"settings.OUTBOX has unknown keys \['SCHEMAS'\]"),
        ({"SCHEMA": "Bad Name"}, "invalid outbox setting in Django settings: .*lowercase SQL"),
        ({"MAX_PAYLOAD_BYTES": 0}, "invalid outbox setting in Django settings: "
                                   "max_payload_bytes"),
    ],
)
def test_bad_settings_are_configuration_errors(blank_db_url: str, outbox: dict[str, Any],
                                               reason: str) -> None:
    proc = manage(blank_db_url, "migrate", check=False, TEST_DJANGO_OUTBOX=json.dumps(outbox))
    assert proc.returncode != 0
    assert "outbox.errors.ConfigurationError" in proc.stderr
    assert re.search(reason, proc.stderr), proc.stderr
    assert relations(blank_db_url, "outbox") == set()


def test_sqlite_is_refused(tmp_path: Path, blank_db_url: str) -> None:
    proc = manage(blank_db_url, "migrate", check=False,
                  TEST_DJANGO_SQLITE=str(tmp_path / "db.sqlite3"))
    assert proc.returncode != 0
    assert "database 'default' is sqlite: outbox needs PostgreSQL" in proc.stderr
