"""Replay of many rows: batches, interruption and re-run, concurrent replays, a real worker."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from outbox.admin import deadletter as dl
from outbox.admin import replay as rp
from outbox.errors import OperationRefused
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.cli import delivery_ids, execute, invoke, kill
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, drain, emit, rows, settings, states

N = 2500


@pytest.fixture
def many_dead(db_url: str) -> list[int]:
    add_endpoint(db_url, "http://127.0.0.1:9/many")
    emit(db_url, N)
    ids = delivery_ids(db_url)
    kill(db_url, ids, attempts=1)
    return ids


def _replayed_log(db_url: str) -> tuple[int, int]:
    (row,) = execute(db_url, f"SELECT count(*), count(DISTINCT delivery_id) FROM"
                             f" {SCHEMA}.delivery_attempts WHERE outcome = 'replayed'")
    return int(row[0]), int(row[1])


def test_replay_goes_in_batches(db_url: str, many_dead: list[int]) -> None:
    done = invoke(db_url, "replay", "--all", "--batch-size", "1000")
    assert done.exit_code == 0, done.output
    assert f"replayed {N} deliveries in 3 batch(es)" in done.stdout
    assert states(db_url) == {"pending": N}
    assert _replayed_log(db_url) == (N, N)


def test_interrupted_replay_reruns_cleanly(db_url: str, many_dead: list[int]) -> None:
    seen: list[tuple[int, int]] = []

    def abort_after_first_batch(done: int, total: int) -> None:
        seen.append((done, total))
        raise KeyboardInterrupt  # Ctrl-C between batches

    with psycopg.connect(db_url, autocommit=True) as conn:
        with pytest.raises(KeyboardInterrupt):
            rp.replay(conn, schema=SCHEMA, selection=dl.Selection(), batch_size=1000,
                      progress=abort_after_first_batch)
        assert seen == [(1000, N)]
        assert states(db_url) == {"pending": 1000, "dead": N - 1000}
        assert delivery_ids(db_url, "state = 'pending'") == many_dead[:1000]  # keyset by id
        calls: list[tuple[int, int]] = []
        result = rp.replay(conn, schema=SCHEMA, selection=dl.Selection(), batch_size=1000,
                           progress=lambda done, total: calls.append((done, total)))
    assert (result.replayed, result.skipped, result.batches) == (N - 1000, 0, 2)
    assert calls == [(1000, 1500), (1500, 1500)]
    assert states(db_url) == {"pending": N}
    assert _replayed_log(db_url) == (N, N)


def test_concurrent_replays_never_replay_a_row_twice(db_url: str,
                                                     many_dead: list[int]) -> None:
    results: list[rp.ReplayResult] = []
    start = threading.Barrier(3)

    def run() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            start.wait()
            results.append(rp.replay(conn, schema=SCHEMA, selection=dl.Selection(),
                                     batch_size=100))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3
    assert sum(r.replayed for r in results) == N
    assert states(db_url) == {"pending": N}
    assert _replayed_log(db_url) == (N, N)


def test_replay_in_a_transaction_is_refused(db_url: str, many_dead: list[int]) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("SELECT 1")
        with pytest.raises(OperationRefused, match="outside a transaction"):
            rp.replay(conn, schema=SCHEMA, selection=dl.Selection())
    assert states(db_url) == {"dead": N}


def test_replayed_delivery_reaches_the_receiver_with_its_webhook_id(db_url: str) -> None:
    with Receiver(secret=SECRET, default=Behaviour(status=500)) as rx:
        add_endpoint(db_url, rx.url + "/fixed-later", max_attempts=1)
        (event_id,) = emit(db_url, 1, "invoice.paid")
        drain(settings(db_url))
        assert states(db_url) == {"dead": 1}
        dead = json.loads(invoke(db_url, "dead", "list", "--json").stdout)
        assert [d["event_id"] for d in dead] == [str(event_id)]
        rx.set_default(Behaviour(status=200))  # the receiver is fixed
        done = invoke(db_url, "replay", "--id", str(dead[0]["id"]))
        assert done.exit_code == 0, done.output
        drain(settings(db_url))
        assert rx.wait_for(2, 5)
    assert [r.webhook_id for r in rx.received] == [str(event_id)] * 2
    assert [r.answer for r in rx.received] == [500, 200]
    assert all(r.signature_ok for r in rx.received)
    assert states(db_url) == {"delivered": 1}
    # the replay's first try is kept on the delivery row (migration 0019): the log shows it
    # after the attempts before the replay
    log = rows(db_url, "SELECT attempt, outcome, status_code FROM outbox.delivery_attempt_log"
                       " ORDER BY created_at, id")
    assert log == [(1, "exhausted", 500), (0, "replayed", 500), (1, "delivered", 200)]
