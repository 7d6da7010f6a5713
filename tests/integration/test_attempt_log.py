"""The attempt log with first-try successes kept on the delivery row (migrations/0019_wal.sql):
no delivery_attempts row for attempt 1 delivered with nothing noted, yet every reader (event
detail, dead-letter show) still shows it, with its duration, worker and excerpt; every other
attempt is logged as before."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from outbox._db.connection import render
from outbox.admin import deadletter, events
from outbox.delivery import queries
from tests.support.pg import SCHEMA, UNBUDGETED, claimed_rows
from tests.support.workers import add_endpoint, emit


def _claim(c: psycopg.Connection[Any], limit: int) -> dict[uuid.UUID, tuple[int, uuid.UUID]]:
    token = uuid.uuid4()
    rows = claimed_rows(c.execute(render(queries.CLAIM, SCHEMA).encode(), {
        "limit": limit, "lease": 30.0, "token": token, **UNBUDGETED}).fetchall())
    return {r[3]: (r[0], r[2]) for r in rows}  # event id -> (delivery id, token)


def _complete(c: psycopg.Connection[Any], done: list[Any]) -> int:
    from outbox.delivery.store import _completion_params

    row = c.execute(render(queries.COMPLETE, SCHEMA).encode(),
                    _completion_params(done, "w-1", 10)).fetchone()
    return int(row[0]) if row else -1


def _logged(c: psycopg.Connection[Any], delivery: int) -> list[tuple[object, ...]]:
    return c.execute(f"SELECT attempt, outcome FROM {SCHEMA}.delivery_attempts"
                     " WHERE delivery_id = %s ORDER BY id", (delivery,)).fetchall()


def test_first_try_success_is_shown_but_not_logged(db_url: str) -> None:
    from outbox.delivery.jobs import Completion

    add_endpoint(db_url, "https://example.com/h")
    clean, noted, retried, fenced = emit(db_url, 4)
    with psycopg.connect(db_url, autocommit=True) as c:
        got = _claim(c, 10)
        assert set(got) == {clean, noted, retried, fenced}

        def done(ev: uuid.UUID, state: str, outcome: str, status: int, error: str | None,
                 attempt: int = 1, token: uuid.UUID | None = None) -> Completion:
            did, tok = got[ev]
            return Completion(did, token or tok, state, 0.0, 0, status, error, outcome,
                              attempt, 12.5, None, "ok" if status == 200 else None)

        assert _complete(c, [done(clean, "delivered", "delivered", 200, None),
                             done(noted, "delivered", "delivered", 200, "body cut at 64 KiB"),
                             done(retried, "pending", "retry", 503, "HTTP 503"),
                             done(fenced, "delivered", "delivered", 200, None,
                                  token=uuid.uuid4())]) == 3
        # the retried one comes back (delay 0) and is delivered on its second attempt
        again = _claim(c, 10)
        assert set(again) == {retried}
        got[retried] = again[retried]
        assert _complete(c, [done(retried, "delivered", "delivered", 200, None, attempt=2)]) == 1

        assert _logged(c, got[clean][0]) == []  # carried by its delivery row
        assert _logged(c, got[noted][0]) == [(1, "delivered")]
        assert _logged(c, got[retried][0]) == [(1, "retry"), (2, "delivered")]
        assert _logged(c, got[fenced][0]) == [(1, "fenced")]

        detail = events.get_event(c, clean, schema=SCHEMA)
        (delivery,) = detail.deliveries
        (shown,) = delivery.log
        assert (shown.attempt, shown.outcome, shown.status_code, shown.duration_ms,
                shown.worker, shown.response_excerpt, shown.error) == (
            1, "delivered", 200, 12.5, "w-1", "ok", None)
        assert shown.created_at == delivery.finished_at
        same = deadletter.show(c, got[clean][0], schema=SCHEMA).log
        assert [(a.attempt, a.outcome, a.duration_ms, a.worker) for a in same] == [
            (1, "delivered", 12.5, "w-1")]
        # the others are shown from their log rows alone: nothing rebuilt beside them
        retried_log = events.get_event(c, retried, schema=SCHEMA).deliveries[0].log
        assert [(a.attempt, a.outcome) for a in retried_log] == [(1, "retry"), (2, "delivered")]
        noted_log = deadletter.show(c, got[noted][0], schema=SCHEMA).log
        assert [(a.outcome, a.error) for a in noted_log] == [("delivered", "body cut at 64 KiB")]
        fenced_log = events.get_event(c, fenced, schema=SCHEMA).deliveries[0].log
        assert [(a.attempt, a.outcome) for a in fenced_log] == [(1, "fenced")]
