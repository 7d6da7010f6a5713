"""The database's bad days, run for real: a read-only database mid-drain, connections
terminated under a running worker, a commit hung on a missing synchronous standby."""

from __future__ import annotations

import datetime as dt
import signal
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
import pytest

import outbox
from outbox.admin import partitions
from outbox.admin.migrations import migrate
from outbox.testing.postgres import TempCluster
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.net import free_port
from tests.support.pg import SCHEMA
from tests.support.workers import (
    FAST,
    SECRET,
    add_endpoint,
    emit,
    log_of,
    spawn,
    states,
    wait_until,
)

pytestmark = pytest.mark.slow  # worker processes and faults

APP = "outbox-worker-under-test"


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


@contextmanager
def running(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 0, log_of(proc)[-3000:]
    return log_of(proc)


def terminate(server_url: str, db_url: str, app: str | None = None) -> int:
    """pg_terminate_backend every session of the test's database (or of ``app`` only)."""
    dbname = urlsplit(db_url).path.lstrip("/")
    query = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
             " WHERE datname = %s AND pid <> pg_backend_pid()"
             " AND (%s::text IS NULL OR application_name = %s)")
    with psycopg.connect(server_url, autocommit=True) as c:
        row = c.execute(query, (dbname, app, app)).fetchone()
    return int(row[0]) if row else 0


def set_read_only(server_url: str, db_url: str, on: bool) -> None:
    dbname = urlsplit(db_url).path.lstrip("/")
    action = "SET default_transaction_read_only = on" if on else \
        "RESET default_transaction_read_only"
    with psycopg.connect(server_url, autocommit=True) as c:
        c.execute(f'ALTER DATABASE "{dbname}" {action}'.encode())


def test_read_only_database_mid_drain_is_waited_out(server_url: str, db_url: str) -> None:
    """The database turns read-only mid-drain (a primary demoted, a VIP reaching a
    standby) for longer than the supervisor's quick restarts would last: every worker
    stays up, /readyz says 503 meanwhile, the outage is logged once per state change, and
    after it every event is delivered, none twice."""
    port = free_port()
    with Receiver(secret=SECRET, default=Behaviour(delay=0.05)) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        ids = emit(db_url, 1500)
        single = spawn(db_url, **{**FAST, "OUTBOX_CONCURRENCY": "5",
                                  "OUTBOX_METRICS_PORT": str(port)})
        group = spawn(db_url, "--processes", "2", **{**FAST, "OUTBOX_CONCURRENCY": "5"})
        with running(single, group):
            wait_until(lambda: _get(port, "/readyz")[0] == 200, 30, "the worker ready")
            assert rx.wait_for(100, 60)
            set_read_only(server_url, db_url, True)
            terminate(server_url, db_url)  # sessions reconnect, and come back read-only
            wait_until(lambda: _get(port, "/readyz") == (503, "database unavailable"
                                                         " (read-only)\n"), 15, "503")
            during = len(rx.received)
            time.sleep(8)  # past the supervisor's quick restarts (1 + 2 + 4 s)
            assert len(rx.received) - during < 40, "only requests in flight finish"
            assert single.poll() is None and group.poll() is None
            set_read_only(server_url, db_url, False)
            wait_until(lambda: states(db_url) == {"delivered": 1500}, 120, "all delivered")
            assert _get(port, "/readyz")[0] == 200
            single_log, group_log = stop(single), stop(group)
    assert set(rx.counts()) == {str(i) for i in ids}
    assert rx.duplicates() == {}
    for log in (single_log, group_log):
        assert "database unavailable (read-only: " in log
        assert "database available again after" in log
        assert "database not answering" not in log  # an outage's retries are not a stall
    outages = [line for line in single_log.splitlines() if "database unavailable" in line]
    assert 1 <= len(outages) <= 3, outages  # state changes, not one per retry
    assert "starting another" not in group_log, "a wait is not a crash"


def test_terminated_connections_resume_at_once(server_url: str, db_url: str) -> None:
    """Rounds of pg_terminate_backend on every connection of an idle worker: an event
    emitted right after each is delivered within a second (the statement that finds its
    connection dead is retried at once on a new one)."""
    with Receiver(secret=SECRET) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        proc = spawn(db_url, PGAPPNAME=APP, **FAST)
        with running(proc):
            emit(db_url, 1)
            assert rx.wait_for(1, 30)
            gaps = []
            for round_ in range(12):
                time.sleep(0.3)
                assert terminate(server_url, db_url, APP) >= 1
                start = time.time()
                emit(db_url, 1)
                assert rx.wait_for(round_ + 2, 10)
                gaps.append(rx.received[-1].at - start)
            log = stop(proc)
    print(f"kill -> next delivery: median {statistics.median(gaps):.3f}s,"
          f" max {max(gaps):.3f}s over {len(gaps)} rounds")
    assert max(gaps) < 1.0, gaps
    assert len([line for line in log.splitlines() if "database unavailable" in line]) <= 2


def test_readyz_fails_while_commits_hang(own_cluster: TempCluster) -> None:
    """A synchronous standby that is missing makes every commit wait: /readyz answers 503
    once a call has run longer than OUTBOX_DATABASE_STALL_SECONDS, 200 once commits go
    through again, and the events are delivered."""
    url = own_cluster.url
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c, SCHEMA)
    port = free_port()
    with Receiver(secret=SECRET) as rx:
        add_endpoint(url, rx.url + "/hook")
        proc = spawn(url, OUTBOX_METRICS_PORT=str(port), OUTBOX_DATABASE_STALL_SECONDS="1",
                     **FAST)
        with running(proc):
            wait_until(lambda: _get(port, "/readyz")[0] == 200, 30, "the worker ready")
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
                c.execute("SELECT pg_reload_conf()")
            with psycopg.connect(url) as c:  # the app's emit does not wait for the ghost
                c.execute("SET synchronous_commit = local")
                outbox.emit(c, outbox.Event("test.event", {"n": 1}))
                c.commit()
            wait_until(lambda: _get(port, "/readyz")[0] == 503, 15, "503 while hung")
            assert "not answering" in _get(port, "/readyz")[1]
            assert _get(port, "/healthz")[0] == 200
            time.sleep(2)  # hung for a while: logged once
            assert _get(port, "/readyz")[0] == 503
            with psycopg.connect(url, autocommit=True) as c:
                c.execute("SET synchronous_commit = local")
                c.execute("ALTER SYSTEM RESET synchronous_standby_names")
                c.execute("SELECT pg_reload_conf()")
            wait_until(lambda: _get(port, "/readyz")[0] == 200, 15, "200 again")
            assert rx.wait_for(1, 15)
            wait_until(lambda: "database answering again" in log_of(proc), 5, "logged")
            log = stop(proc)
    assert log.count("database not answering") == 1


@pytest.mark.parametrize("step", ["advance", "drop"])
def test_partition_maintenance_never_holds_emits_behind_a_missing_standby(
        own_cluster: TempCluster, step: str) -> None:
    """The partition manager's catalog work takes ACCESS EXCLUSIVE on events (and on
    deliveries to drop one); its commit does not wait for a synchronous standby, so a
    missing standby cannot leave that lock held and every app's emit queued behind it (the
    app, committing with synchronous_commit = local, keeps emitting)."""
    url = own_cluster.url
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c, SCHEMA)
        add_endpoint(url, "http://127.0.0.1:9/hook")
        if step == "drop":  # a closed, empty partition of each table, due for the drop
            partitions.advance(c, SCHEMA, dt.timedelta(seconds=1))
            time.sleep(2.5)
            partitions.advance(c, SCHEMA, dt.timedelta(seconds=1))
            time.sleep(1.5)
        c.execute("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
        c.execute("SELECT pg_reload_conf()")
    result: list[object] = []

    def maintain() -> None:
        with psycopg.connect(url, autocommit=True) as c:
            if step == "advance":
                result.append(partitions.advance(c, SCHEMA, dt.timedelta(hours=1)))
            else:
                result.append(partitions.drop_expired(c, SCHEMA, dt.timedelta(seconds=1)))

    worker = threading.Thread(target=maintain, daemon=True)
    worker.start()
    try:
        worker.join(20)
        emitted = threading.Event()

        def app_emit() -> None:
            with psycopg.connect(url) as c:
                c.execute("SET synchronous_commit = local")
                outbox.emit(c, outbox.Event("test.event", {"n": 1}))
                c.commit()
            emitted.set()

        threading.Thread(target=app_emit, daemon=True).start()
        assert emitted.wait(20), "the app's emit waited behind the partition manager"
        assert not worker.is_alive(), "the maintenance commit waited for the standby"
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SET synchronous_commit = local")
            c.execute("ALTER SYSTEM RESET synchronous_standby_names")
            c.execute("SELECT pg_reload_conf()")
        worker.join(30)
    if step == "advance":
        assert result and int(result[0]) >= 1  # type: ignore[call-overload]
    else:
        assert result and result[0].dropped >= 1 and result[0].events_dropped >= 1  # type: ignore[attr-defined]
