"""Run ``outbox`` commands in-process (click's test runner) or as a subprocess; seed dead
letters."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from click.testing import CliRunner, Result

from outbox.cli import cli, load_commands
from tests.support.pg import SCHEMA


def invoke(db_url: str, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """``outbox --database-url db_url --schema outbox ARGS``; OUTBOX_ALLOW_NETWORKS unset
    unless ``env`` sets it."""
    load_commands()
    full: dict[str, str | None] = {"OUTBOX_ALLOW_NETWORKS": None, **(env or {})}
    return CliRunner().invoke(cli, ["--database-url", db_url, "--schema", SCHEMA, *args],
                              env=full, catch_exceptions=False)


def execute(db_url: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Test-only SQL; returns the rows if the statement has any."""
    with psycopg.connect(db_url, autocommit=True) as c:
        cur = c.execute(query.encode(), params)
        return cur.fetchall() if cur.description else []


def kill(db_url: str, ids: Sequence[int], *, ago: dt.timedelta = dt.timedelta(minutes=5),
         error: str = "HTTP 500", status: int | None = 500, attempts: int = 3) -> None:
    """Make deliveries dead as a worker would: attempt log, last error, finished_at."""
    execute(db_url, f"""
        UPDATE {SCHEMA}.deliveries
           SET state = 'dead', attempts = %(attempts)s, last_status = %(status)s,
               last_error = %(error)s, finished_at = now() - %(ago)s, lease_token = NULL
         WHERE id = ANY (%(ids)s)""",
            {"ids": list(ids), "ago": ago, "error": error, "status": status,
             "attempts": attempts})
    execute(db_url, f"""
        INSERT INTO {SCHEMA}.delivery_attempts (delivery_id, attempt, outcome, status_code,
                                                 error_class, error, created_at)
        SELECT d.id, n, CASE WHEN n = %(attempts)s THEN 'dead' ELSE 'retry' END, %(status)s,
               'http_status', %(error)s, now() - %(ago)s
          FROM unnest(%(ids)s::bigint[]) AS d(id), generate_series(1, %(attempts)s) AS n""",
            {"ids": list(ids), "ago": ago, "error": error, "status": status,
             "attempts": attempts})


def delivery_ids(db_url: str, where: str = "TRUE", params: Any = None) -> list[int]:
    rows = execute(db_url, f"SELECT id FROM {SCHEMA}.deliveries WHERE {where} ORDER BY id",
                   params)
    return [int(r[0]) for r in rows]


def snapshot(db_url: str) -> tuple[list[tuple[Any, ...]], ...]:
    """Every row of the tables an operator command might change, for before/after checks."""
    return tuple(
        execute(db_url, f"SELECT * FROM {SCHEMA}.{table} ORDER BY 1")
        for table in ("endpoints", "events", "deliveries", "delivery_attempts")
    )


def old_uuid7(when: dt.datetime) -> uuid.UUID:
    """A UUIDv7 for ``when`` (version and variant bits set, random tail)."""
    millis = int(when.timestamp() * 1000)
    rand = uuid.uuid4().int & ((1 << 74) - 1)
    value = (millis << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (
        rand & ((1 << 62) - 1))
    return uuid.UUID(int=value)


def run_cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m outbox ARGS`` in a subprocess, on ``db_url``'s outbox schema."""
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA}
    return subprocess.run(
        [sys.executable, "-m", "outbox", *args], capture_output=True, text=True, env=env,
        timeout=60,
    )
