"""The worker prunes finished rows past retention on its timer, leaving to the partition
drop the rows it will take; one pruner at a time."""

from __future__ import annotations

import datetime as dt
import time

import psycopg

from outbox.delivery.retention_task import prune_once
from outbox.testing.receiver import Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, drain, emit, rows, run_until, settings


def _age_finished(db_url: str, days: int) -> None:
    """Rows that finished ``days`` ago, in partitions opened and closed that much earlier
    too (the worker's prune leaves a recent partition's rows to its drop)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"UPDATE outbox.delivery_partitions SET opened_at = opened_at - interval"
                  f" '{days} days', closed_at = closed_at - interval '{days} days'".encode())
        c.execute(f"UPDATE outbox.deliveries SET finished_at = now() - interval '{days} days'"
                  " WHERE state = 'delivered'".encode())
        c.execute(f"UPDATE outbox.events SET created_at = now() - interval '{days} days'".encode())


def test_worker_prunes_on_its_timer(db_url: str) -> None:
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/x")
        emit(db_url, 20)
        drain(settings(db_url))
    _age_finished(db_url, 10)
    emit(db_url, 3)  # pending: must survive
    cfg = settings(db_url, retention_seconds=7 * 86400, prune_interval_seconds=0.3,
                   prune_batch_size=7)
    run_until(cfg, lambda: rows(db_url, "SELECT count(*) FROM outbox.deliveries") == [(3,)])
    orphans = ("SELECT count(*) FROM outbox.delivery_attempts a WHERE NOT EXISTS"
               " (SELECT 1 FROM outbox.deliveries d WHERE d.id = a.delivery_id)")
    assert rows(db_url, orphans) == [(0,)]  # the pruned deliveries took their logs along
    # (events go by UUIDv7 id range, covered by test_prune; these ids are brand new)


def test_only_one_pruner_at_a_time(db_url: str) -> None:
    cfg = settings(db_url, retention_seconds=1)
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('outbox.prune'), hashtext(%s))",
                       (SCHEMA,))
        assert prune_once(cfg) is None  # another worker holds the lock: skipped
        # released explicitly: a closed connection's backend may hold it a moment longer
        holder.execute("SELECT pg_advisory_unlock(hashtext('outbox.prune'), hashtext(%s))",
                       (SCHEMA,))
    result = prune_once(cfg)
    assert result is not None and result.deliveries == 0


def test_pruner_vacuums_when_the_server_has_no_autovacuum(db_url: str) -> None:
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/x")
        emit(db_url, 5)
        drain(settings(db_url))
    _age_finished(db_url, 10)
    # summed over the partitions of deliveries (migrations/0018: the parent has no storage)
    query = ("SELECT sum(vacuum_count), current_setting('autovacuum') = 'off' FROM"
             " pg_stat_user_tables WHERE relid IN (SELECT inhrelid FROM pg_inherits"
             " WHERE inhparent = 'outbox.deliveries'::regclass)")
    ((before, autovacuum_off),) = rows(db_url, query)
    result = prune_once(settings(db_url, retention_seconds=7 * 86400))
    assert result is not None and result.deliveries == 5
    deadline = 50
    while deadline and rows(db_url, query)[0][0] == before:  # statistics arrive lazily
        deadline -= 1
        time.sleep(0.1)
    ((after, _),) = rows(db_url, query)
    assert (after > before) == autovacuum_off


def test_worker_leaves_a_recent_partitions_rows_to_its_drop(db_url: str) -> None:
    """Rows past retention in a partition opened within the retention plus one width are
    the drop's (no DELETE, lock or vacuum: fewer WAL bytes); the library's prune without a
    width, as ``outbox prune`` runs it, deletes them."""
    from outbox.admin.retention import prune

    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/x")
        emit(db_url, 4)
        drain(settings(db_url))
    with psycopg.connect(db_url, autocommit=True) as c:  # finished past retention, but in
        c.execute("UPDATE outbox.deliveries SET finished_at = now() - interval '2 hours'")
    cfg = settings(db_url, retention_seconds=3600, partition_seconds=600)
    result = prune_once(cfg)  # the open partition opened just now: its drop will take them
    assert result is not None and result.deliveries == 0
    assert rows(db_url, "SELECT count(*) FROM outbox.deliveries") == [(4,)]
    with psycopg.connect(db_url, autocommit=True) as c:  # opened before cutoff - width
        c.execute("UPDATE outbox.delivery_partitions SET opened_at = now() - interval"
                  " '1 hour 11 minutes' WHERE opened_at IS NOT NULL AND closed_at IS NULL")
    result = prune_once(cfg)  # a partition held open (a stalled manager): row by row
    assert result is not None and result.deliveries == 4
    emit(db_url, 2)  # to the endpoint above, into a partition opened just now
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.delivery_partitions SET opened_at = now()"
                  " WHERE opened_at IS NOT NULL AND closed_at IS NULL")
        c.execute("UPDATE outbox.deliveries SET state = 'delivered',"
                  " finished_at = now() - interval '2 hours'")
        assert prune(c, SCHEMA, dt.timedelta(hours=1)).deliveries == 2
