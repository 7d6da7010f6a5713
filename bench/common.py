"""Shared plumbing for the benchmarks: a scratch database, timing statistics, JSON output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from outbox.admin.migrations import migrate
from outbox.testing import postgres

SCHEMA = "outbox"


@contextmanager
def scratch_database() -> Iterator[str]:
    """A new migrated database on the bench server, dropped afterwards; yields its URL."""
    server = postgres.find_or_start(os.environ.get("OUTBOX_BENCH_DATABASE_URL") or None)
    name = f"outbox_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))
    try:
        with psycopg.connect(url, autocommit=True) as c:
            migrate(c, SCHEMA)
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            c.execute(drop.format(sql.Identifier(name)))


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of samples (same unit in, same unit out)."""
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": statistics.median(ordered), "p90": q[89], "p99": q[98], "max": ordered[-1]}


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def emit_json(name: str, results: dict[str, Any]) -> None:
    """Print the results as one JSON line (for scripts) after the human-readable lines."""
    payload = {"bench": name, "environment": environment(), "results": results}
    sys.stdout.write(json.dumps(payload) + "\n")
