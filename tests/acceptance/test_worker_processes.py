"""Worker processes under stress: many at once, SIGKILL, SIGTERM, a database restart."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from outbox.admin.migrations import migrate
from outbox.testing.postgres import TempCluster
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import (
    FAST,
    SECRET,
    add_endpoint,
    emit,
    log_of,
    rows,
    spawn,
    states,
    wait_until,
)

pytestmark = pytest.mark.slow  # worker processes, kills, a database restart

@contextmanager
def workers(db_url: str, n: int, **env: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [spawn(db_url, **{**FAST, **env}) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> str:
    """SIGTERM, wait, and return stderr; the exit status must be 0."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=timeout)
    assert proc.returncode == 0, log_of(proc)[-2000:]
    return log_of(proc)


def test_hammer_four_processes(db_url: str) -> None:
    """5,000 events, 4 worker processes: every event arrives once, every signature verifies."""
    with Receiver(secret=SECRET) as rx, workers(db_url, 4, OUTBOX_CONCURRENCY="50") as procs:
        add_endpoint(db_url, rx.url + "/hammer")
        ids = emit(db_url, 5000)
        assert rx.wait_for(5000, 180, distinct=True)
        wait_until(lambda: states(db_url) == {"delivered": 5000}, 60, "all recorded")
        logs = [stop(p) for p in procs]
    counts = rx.counts()
    assert set(counts) == {str(i) for i in ids}
    assert rx.duplicates() == {}
    assert rx.invalid_signatures() == []
    delivered = [int(log.rsplit("delivered=", 1)[1].split()[0]) for log in logs]
    assert sum(delivered) == 5000
    assert sum(1 for d in delivered if d > 0) >= 3, f"work not shared: {delivered}"


def test_sigkill_mid_batch_is_recovered_after_the_lease(db_url: str) -> None:
    lease = {"OUTBOX_LEASE_SECONDS": "3", "OUTBOX_HTTP_TIMEOUT_SECONDS": "2"}
    with Receiver(secret=SECRET, default=Behaviour(delay=0.3)) as rx:
        add_endpoint(db_url, rx.url + "/slow")
        ids = emit(db_url, 300)
        with workers(db_url, 1, OUTBOX_CONCURRENCY="40", **lease) as (victim,):
            assert rx.wait_for(60, 30)
            victim.kill()  # SIGKILL: no cleanup at all
            victim.wait(10)
        held = {str(r[0]) for r in rows(
            db_url, "SELECT event_id FROM outbox.deliveries"
                    " WHERE state = 'pending' AND lease_token IS NOT NULL")}
        assert held, "the victim should have died holding leases"
        killed_at = time.monotonic()
        with workers(db_url, 2, OUTBOX_CONCURRENCY="40", **lease) as survivors:
            wait_until(lambda: states(db_url) == {"delivered": 300}, 120, "recovery")
            recovered_after = time.monotonic() - killed_at
            for p in survivors:
                stop(p)
    assert set(rx.counts()) == {str(i) for i in ids}
    duplicates = set(rx.duplicates())
    assert duplicates <= held, "only deliveries in flight at the kill may repeat"
    assert all(n == 2 for n in rx.duplicates().values())
    assert recovered_after >= 2.0  # the victim's rows waited for their lease


def test_sigterm_finishes_in_flight_and_loses_nothing(db_url: str) -> None:
    with Receiver(secret=SECRET, default=Behaviour(delay=0.3)) as rx:
        add_endpoint(db_url, rx.url + "/slow")
        ids = emit(db_url, 200)
        with workers(db_url, 1, OUTBOX_CONCURRENCY="40",
                     OUTBOX_SHUTDOWN_GRACE_SECONDS="10") as (proc,):
            assert rx.wait_for(20, 30)
            log = stop(proc)
        assert "stopping: no new claims" in log
        # in-flight requests were finished and recorded: nothing is left leased
        assert rows(db_url, "SELECT count(*) FROM outbox.deliveries"
                            " WHERE state = 'pending' AND lease_token IS NOT NULL") == [(0,)]
        sent_before = len(rx.received)
        assert states(db_url).get("delivered") == sent_before
        with workers(db_url, 1, OUTBOX_CONCURRENCY="40") as (proc,):
            wait_until(lambda: states(db_url) == {"delivered": 200}, 60, "the rest")
            stop(proc)
    assert set(rx.counts()) == {str(i) for i in ids}
    assert rx.duplicates() == {}


def test_database_restart_mid_run(own_cluster: TempCluster) -> None:
    url = own_cluster.url
    with psycopg.connect(url, autocommit=True) as c:
        migrate(c, SCHEMA)
    with Receiver(secret=SECRET, default=Behaviour(delay=0.05)) as rx:
        add_endpoint(url, rx.url + "/hook")
        ids = emit(url, 400)
        with workers(url, 1, OUTBOX_CONCURRENCY="10") as (proc,):
            assert rx.wait_for(50, 30)
            own_cluster.stop("fast")
            time.sleep(3)
            assert proc.poll() is None, "the worker must survive a database outage"
            own_cluster.start()
            wait_until(lambda: states(url) == {"delivered": 400}, 120, "delivery after restart")
            log = stop(proc)
    assert set(rx.counts()) == {str(i) for i in ids}
    retries = [line for line in log.splitlines() if "database unavailable" in line]
    assert retries, "the outage should be logged"
    assert len(retries) < 30, "backoff, not a spin"
