"""Behind PgBouncer in transaction mode (Debian's pgbouncer, started here): migrate, the
CLI, four emitting stacks, two workers -- with ``OUTBOX_PREPARE_THRESHOLD=none`` as the
one setting -- and afterwards the server connections the app shares carry nothing of
ours: its isolation level, timeouts, locks, channels and prepared statements are its own.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import httpx
import psycopg
import psycopg2
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import outbox
from outbox._db.connection import connect, translated
from outbox.admin import migrations
from outbox.settings import Settings, get_settings
from outbox.testing.receiver import Receiver
from tests.support.net import free_port
from tests.support.pg import SCHEMA
from tests.support.pgbouncer import PgBouncer
from tests.support.workers import FAST, SECRET, log_of, spawn, states, wait_until

pytestmark = pytest.mark.slow  # a pooler, worker processes

ROOT = Path(__file__).resolve().parents[2]
POOLED = {"OUTBOX_PREPARE_THRESHOLD": "none"}
PER_STACK = 100


@pytest.fixture
def bouncer(server_url: str) -> Iterator[PgBouncer]:
    with PgBouncer(server_url, pool_size=4) as pb:
        yield pb


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA,
           "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", **POOLED}
    return subprocess.run([sys.executable, "-m", "outbox", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def migrate_concurrently(url: str, runs: int) -> list[tuple[int, str, str]]:
    """``outbox migrate`` started ``runs`` times at once: (status, stdout, stderr) each."""
    env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA, **POOLED}
    procs = [subprocess.Popen([sys.executable, "-m", "outbox", "migrate"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(runs)]
    return [(p.wait(timeout=120), *p.communicate()) for p in procs]


def emit_all_stacks(url: str) -> list[str]:
    """PER_STACK events from each stack, one transaction each, with what each driver
    needs behind a transaction pooler (and OUTBOX_PREPARE_THRESHOLD=none for outbox's own
    statements on psycopg2 and SQLAlchemy)."""
    ids: list[str] = []
    event = outbox.Event("order.paid", {"total": 1})
    with psycopg.connect(url, prepare_threshold=None) as conn:  # psycopg 3
        for _ in range(PER_STACK):
            ids.append(str(outbox.emit(conn, event)))
            conn.commit()

    async def with_asyncpg() -> None:
        conn = await asyncpg.connect(url, statement_cache_size=0)
        try:
            for _ in range(PER_STACK):
                async with conn.transaction():
                    ids.append(str(await outbox.emit_async(conn, event)))
        finally:
            await conn.close()

    asyncio.run(with_asyncpg())
    conn2 = psycopg2.connect(url)
    try:
        for _ in range(PER_STACK):
            ids.append(str(outbox.emit(conn2, event)))
            conn2.commit()
    finally:
        conn2.close()
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1),
                           connect_args={"prepare_threshold": None})
    try:
        for _ in range(PER_STACK):
            with Session(engine) as session, session.begin():
                ids.append(str(outbox.emit(session, event)))
    finally:
        engine.dispose()
    return ids


def server_connections_state(url: str, n: int) -> list[tuple[Any, ...]]:
    """What ``n`` concurrent app transactions through the pooler see of their sessions
    (held open together, so each runs on a server connection of its own)."""
    conns = [psycopg.connect(url, prepare_threshold=None) for _ in range(n)]
    try:
        return [c.execute("""
            SELECT pg_backend_pid(), current_setting('transaction_isolation'),
                   current_setting('lock_timeout'), current_setting('statement_timeout'),
                   current_setting('idle_in_transaction_session_timeout'),
                   COALESCE(current_setting('outbox.claim_after', true), ''),
                   (SELECT count(*) FROM pg_listening_channels()),
                   (SELECT count(*) FROM pg_prepared_statements),
                   (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                       AND pid = pg_backend_pid())""").fetchone() or () for c in conns]
    finally:
        for c in conns:
            c.close()


def test_everything_through_pgbouncer_transaction_mode(
        bouncer: PgBouncer, server_url: str, blank_db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dbname = urlsplit(blank_db_url).path.lstrip("/")
    with psycopg.connect(server_url, autocommit=True) as c:  # what the app runs under
        c.execute(f'ALTER DATABASE "{dbname}" SET default_transaction_isolation'
                  f" = 'serializable'".encode())
    url = bouncer.url(blank_db_url)
    monkeypatch.setenv("OUTBOX_PREPARE_THRESHOLD", "none")
    get_settings.cache_clear()

    runs = migrate_concurrently(url, 3)
    assert [status for status, _, _ in runs] == [0, 0, 0], runs
    outputs = [out for _, out, _ in runs]
    assert sum("applied 0001" in out for out in outputs) == 1, outputs
    with psycopg.connect(blank_db_url) as c:
        applied = [r[0] for r in c.execute(f"SELECT version FROM {SCHEMA}.schema_migrations"
                                           " ORDER BY 1".encode())]
    assert applied == [m.version for m in migrations.available()]

    with Receiver(secret=SECRET) as rx:
        added = cli(url, "endpoints", "add", rx.url + "/hook", "--secret", SECRET)
        assert added.returncode == 0, added.stderr
        workers = [spawn(url, **FAST, **POOLED) for _ in range(2)]
        try:
            ids = emit_all_stacks(url)
            wait_until(lambda: states(blank_db_url) == {"delivered": 4 * PER_STACK}, 120,
                       "every event delivered through the pooler")
            stats = cli(url, "stats")
            assert stats.returncode == 0, stats.stderr
        finally:
            for w in workers:
                w.terminate()
            for w in workers:
                w.wait(timeout=60)
        assert [w.returncode for w in workers] == [0, 0], [log_of(w)[-2000:] for w in workers]
        assert set(rx.counts()) == set(ids)
    for w in workers:
        log = log_of(w)
        assert log.count("needs a session of its own") == 1, log[-2000:]
        assert "Traceback" not in log, log[-3000:]

    seen = server_connections_state(url, 4)
    assert len({row[0] for row in seen}) == 4  # every server connection of the pool
    for _pid, isolation, lock_timeout, stmt_timeout, idle_timeout, *rest in seen:
        assert isolation == "serializable"  # the database's default, not the worker's
        assert (lock_timeout, stmt_timeout, idle_timeout) == ("0", "0", "0")
        assert rest == ["", 0, 0, 0]  # no claim position, LISTEN, prepared statement, lock


def test_serve_through_pgbouncer_transaction_mode(
        bouncer: PgBouncer, server_url: str, db_url: str) -> None:
    """``outbox serve`` behind the pooler with ``OUTBOX_PREPARE_THRESHOLD=none``: the API
    answers every request (each on its own client connection, many more than the pool's
    server connections), an endpoint created through it is listed by the next ones,
    /readyz says 200, and the server connections carry nothing of it afterwards."""
    url, port, token = bouncer.url(db_url), free_port(), "t0ken-through-pgbouncer"
    env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA,
           "OUTBOX_ADMIN_TOKEN": token, "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", **POOLED}
    proc = subprocess.Popen([sys.executable, "-m", "outbox", "serve", "--port", str(port),
                             "--log-level", "warning"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}

    def ready() -> bool:
        try:
            return httpx.get(base + "/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, 30, "outbox serve ready through the pooler")
        made = httpx.post(base + "/api/endpoints", headers=auth, timeout=10,
                          json={"url": "http://127.0.0.1:9/through-the-pooler"})
        assert made.status_code == 201, made.text
        for _ in range(12):
            listed = httpx.get(base + "/api/endpoints", headers=auth, timeout=10)
            assert listed.status_code == 200, listed.text
            urls = [e["url"] for e in listed.json()["endpoints"]]
            assert "http://127.0.0.1:9/through-the-pooler" in urls
            one = httpx.get(base + f"/api/endpoints/{made.json()['endpoint']['id']}",
                            headers=auth, timeout=10)
            assert one.status_code == 200, one.text
        assert ready()
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    assert "Traceback" not in out, out[-3000:]
    for _pid, _iso, *timeouts, position, listening, prepared, locks in \
            server_connections_state(url, 4):
        assert timeouts == ["0", "0", "0"] and position == ""
        assert (listening, prepared, locks) == (0, 0, 0)


def test_prepared_statement_clash_names_the_setting(
        bouncer: PgBouncer, server_url: str, db_url: str) -> None:
    """Two psycopg clients that prepare, on one shared server connection: the second's
    error says what to set."""
    dbname = urlsplit(db_url).path.lstrip("/")
    with PgBouncer(server_url, databases={"shared": dbname}) as one:  # pool_size=1
        url = one.url(db_url).rsplit("/", 1)[0] + "/shared"
        settings = Settings(database_url=url, schema_name=SCHEMA, prepare_threshold=0)
        with connect(settings) as first:
            first.execute("SELECT 1 WHERE %s", (True,))  # prepared as _pg3_0
            first.commit()
            clash = pytest.raises(outbox.errors.DatabaseError,
                                  match="OUTBOX_PREPARE_THRESHOLD=none")
            with connect(settings) as second, clash, translated():
                second.execute("SELECT 2 WHERE %s", (True,))


def test_the_guide_snippet_emits_through_pgbouncer(bouncer: PgBouncer, db_url: str) -> None:
    """docs/guides/database.md's app-side snippet, pasted, against PgBouncer in
    transaction mode: both events committed."""
    guide = (ROOT / "docs" / "guides" / "database.md").read_text()
    section = guide.split("## Behind PgBouncer", 1)[1]
    match = re.search(r"```python\n(.*?)\n```", section, re.S)
    assert match, "the PgBouncer section has a python block"
    env = {**os.environ, "DATABASE_URL": bouncer.url(db_url), "OUTBOX_SCHEMA": SCHEMA}
    done = subprocess.run([sys.executable, "-c", match.group(1)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(db_url) as c:
        row = c.execute(f"SELECT count(*) FROM {SCHEMA}.events"
                        " WHERE type = 'invoice.paid'".encode()).fetchone()
    assert row == (2,)
