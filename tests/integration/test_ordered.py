"""Ordered endpoints: per key, one delivery at a time, in emit order; a dead head
blocks its key until replayed or skipped; everything else flows as before."""

from __future__ import annotations

import json
import random
import re
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
import pytest

import outbox
from outbox._db.connection import render
from outbox.admin import deadletter as dl
from outbox.admin import replay as rp
from outbox.admin import stats as st
from outbox.delivery import queries as dq
from outbox.errors import DeliveryNotFound, OperationRefused
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.cli import invoke
from tests.support.pg import SCHEMA, UNBUDGETED, claimed_rows
from tests.support.workers import (
    SECRET,
    add_endpoint,
    rows,
    run_until,
    settings,
    spawn,
    wait_until,
)


class ByEvent(Receiver):
    """A receiver that answers ``fail`` to the webhook-ids in ``failing``, 503 to a random
    ``flaky`` share of the rest, 200 otherwise."""

    def __init__(self, *, flaky: float = 0.0, seed: int = 7) -> None:
        super().__init__(secret=SECRET)
        self.failing: dict[str, int] = {}
        self._flaky = flaky
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def _record(self, target: str, raw_headers: Mapping[str, str], body: bytes) -> Behaviour:
        plain = super()._record(target, raw_headers, body)
        msg_id = {k.lower(): v for k, v in raw_headers.items()}.get("webhook-id", "")
        if msg_id in self.failing:
            return Behaviour(self.failing[msg_id])
        with self._lock:
            if self._random.random() < self._flaky:
                return Behaviour(503)
        return plain

    def __enter__(self) -> ByEvent:
        return self

    def sequence(self, key: str) -> list[int]:
        """The ``n`` of the key's events, in arrival order, first sight of each only."""
        seen: list[int] = []
        for r in self.received:
            body = json.loads(r.body)
            if body["key"] == key and body["n"] not in seen:
                seen.append(body["n"])
        return seen

    def got(self, key: str) -> set[int]:
        return set(self.sequence(key))


def emit_keyed(db_url: str, pairs: Iterable[tuple[str, int]], *, many: bool = True
               ) -> list[uuid.UUID]:
    events = [outbox.Event("order.changed", {"key": k, "n": n}, key=k) for k, n in pairs]
    with psycopg.connect(db_url) as c:
        ids = (outbox.emit_many(c, events) if many
               else [outbox.emit(c, e) for e in events])
        c.commit()
    return ids


def by_state(db_url: str, where: str = "TRUE") -> dict[str, int]:
    return dict(rows(db_url, f"SELECT state, count(*)::int FROM {SCHEMA}.deliveries"
                             f" WHERE {where} GROUP BY 1"))


def delivery_of(db_url: str, event_id: uuid.UUID) -> int:
    return int(rows(db_url, f"SELECT id FROM {SCHEMA}.deliveries WHERE event_id = %s",
                    (event_id,))[0][0])


def all_delivered(db_url: str) -> bool:
    return set(by_state(db_url)) <= {"delivered"}


def test_each_key_in_emit_order_through_retries(db_url: str) -> None:
    """6 keys x 15 events, 30% 503s, a worker claiming 20 at a time: per key the receiver
    first sees the events in emit order, and every one of them."""
    keys = [f"order-{i}" for i in range(6)]
    with ByEvent(flaky=0.3) as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        pairs = [(k, n) for n in range(15) for k in keys]
        emit_keyed(db_url, pairs[:40])  # the COPY path
        emit_keyed(db_url, pairs[40:], many=False)  # one emit per event
        run_until(settings(db_url, batch_size=20, concurrency=20),
                  lambda: all_delivered(db_url), timeout=60)
        for k in keys:
            assert rx.sequence(k) == list(range(15)), (k, rx.sequence(k))
    # one at a time per key: never two of a key answered 2xx out of order either
    assert by_state(db_url) == {"delivered": 90}


def test_unordered_endpoint_and_keyless_events_flow_as_before(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        ordered = add_endpoint(db_url, rx.url + "/ordered", ordered=True)
        plain = add_endpoint(db_url, rx.url + "/plain")
        keyed = emit_keyed(db_url, [("k", n) for n in range(5)])
        with psycopg.connect(db_url) as c:
            keyless = outbox.emit_many(c, [outbox.Event("order.changed", {"n": n})
                                           for n in range(3)])
            one = outbox.emit(c, outbox.Event("order.changed", {"n": 9}))
            c.commit()
        got = rows(db_url, f"SELECT event_id, endpoint_id, state, key FROM {SCHEMA}.deliveries")
        state = {(e, p): (s, k) for e, p, s, k in got}
        for e in keyed:
            assert state[(e, plain)] == ("pending", None)  # unordered: as before
            assert state[(e, ordered)] == ("fresh", "k")
        for e in [*keyless, one]:
            assert state[(e, plain)] == ("pending", None)
            assert state[(e, ordered)] == ("pending", None)  # no key: not ordered
        run_until(settings(db_url), lambda: all_delivered(db_url))
        assert len(rx.counts()) == 9


def test_ids_follow_emit_order_in_a_batch(db_url: str) -> None:
    add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    for many in (True, False):
        events = emit_keyed(db_url, [(k, n) for n in range(30) for k in "abc"], many=many)
        ids = [delivery_of(db_url, e) for e in events]
        for k in range(3):
            mine = ids[k::3]
            assert mine == sorted(mine)


def _run_until_key_blocked(db_url: str, rx: ByEvent, n: int) -> dict[str, list[uuid.UUID]]:
    events = {k: emit_keyed(db_url, [(k, i) for i in range(n)]) for k in ("a", "b", "c")}
    rx.failing[str(events["b"][1])] = 400  # b's second event is refused for good
    dead = delivery_of(db_url, events["b"][1])

    def settled() -> bool:
        return (rx.got("a") == rx.got("c") == set(range(n))
                and rows(db_url, f"SELECT state FROM {SCHEMA}.deliveries WHERE id = %s",
                         (dead,))[0][0] == "dead")

    run_until(settings(db_url), settled)
    return events


def test_dead_head_blocks_its_key_and_replay_resumes_in_order(db_url: str) -> None:
    n = 8
    with ByEvent() as rx:
        endpoint = add_endpoint(db_url, rx.url + "/o", ordered=True)
        events = _run_until_key_blocked(db_url, rx, n)
        assert rx.sequence("b") == [0, 1]  # 2..n-1 were never sent
        dead = delivery_of(db_url, events["b"][1])
        assert by_state(db_url, "key = 'b'") == {"delivered": 1, "dead": 1, "waiting": n - 2}
        # visible: stats, dead show, the gauge's query
        with psycopg.connect(db_url, autocommit=True) as c:
            [figures] = st.by_endpoint(c, schema=SCHEMA)
            detail = dl.show(c, dead, schema=SCHEMA)
            blocked = c.execute(render(dq.BLOCKED, SCHEMA)).fetchone()
            gauges = c.execute(render(dq.BACKLOG, SCHEMA)).fetchone()  # the worker's gauges
        assert (figures.endpoint_id, figures.waiting, figures.blocked,
                figures.blocked_keys) == (endpoint, n - 2, n - 2, 1)
        assert detail.blocking and detail.held_back == n - 2
        assert blocked == (1, n - 2)
        assert gauges is not None and tuple(gauges)[-2:] == (1, n - 2)
        shown = invoke(db_url, "dead", "show", str(dead))
        assert f"yes: {n - 2} later deliveries wait" in shown.output, shown.output
        table = invoke(db_url, "stats")
        assert f"{n - 2} ({n - 2} blocked, 1 keys)" in table.output, table.output
        # replay: b's event 1 goes again, then 2..n-1 in order; replaying twice is a no-op
        del rx.failing[str(events["b"][1])]
        for _ in range(2):
            done = invoke(db_url, "replay", "--id", str(dead))
            assert done.exit_code == 0, done.output
        run_until(settings(db_url), lambda: all_delivered(db_url))
        assert rx.sequence("b") == list(range(n))
        assert rx.counts()[str(events["b"][1])] == 2


def test_dead_skip_releases_the_key_without_the_head(db_url: str) -> None:
    n = 6
    with ByEvent() as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        events = _run_until_key_blocked(db_url, rx, n)
        dead = delivery_of(db_url, events["b"][1])
        refused = invoke(db_url, "dead", "skip", str(delivery_of(db_url, events["a"][0])))
        assert refused.exit_code == 1 and "not dead" in refused.output, refused.output
        done = invoke(db_url, "dead", "skip", str(dead))
        assert done.exit_code == 0 and f"skipped {dead}" in done.output, done.output
        again = invoke(db_url, "dead", "skip", str(dead))  # idempotent
        assert again.exit_code == 0 and "unchanged" in again.output, again.output
        run_until(settings(db_url), lambda: rx.got("b") == set(range(n))
                  and by_state(db_url, "state <> 'dead'") == {"delivered": 3 * n - 1})
        assert rx.sequence("b") == [0, 1, *range(2, n)]
        assert rx.counts()[str(events["b"][1])] == 1  # skipped: not sent again
        outcomes = rows(db_url, f"SELECT outcome, worker FROM {SCHEMA}.delivery_attempts"
                                " WHERE delivery_id = %s ORDER BY id", (dead,))
        assert [o for o, _ in outcomes] == ["dead", "skipped"]
        assert by_state(db_url, f"id = {dead}") == {"dead": 1}


def test_skip_and_replay_twice_at_once_while_workers_run(db_url: str) -> None:
    """Two worker processes keep running; skips of one blocked key and replays of another
    are each issued twice from two threads at once: b goes on without its event 1, d gets
    its event 1 again and then the rest, each in order, nothing twice."""
    n = 6
    fast = {"OUTBOX_POLL_INTERVAL_SECONDS": "0.05", "OUTBOX_RETRY_BASE_SECONDS": "0.05",
            "OUTBOX_RETRY_CAP_SECONDS": "0.2"}
    with ByEvent() as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        events = {k: emit_keyed(db_url, [(k, i) for i in range(n)]) for k in "abd"}
        for k in "bd":
            rx.failing[str(events[k][1])] = 400
        dead = {k: delivery_of(db_url, events[k][1]) for k in "bd"}
        procs = [spawn(db_url, **fast) for _ in range(2)]
        try:
            wait_until(lambda: by_state(db_url, "state = 'dead'") == {"dead": 2}
                       and rx.got("a") == set(range(n)), 30, "b and d blocked")
            rx.failing.clear()
            results: list[Any] = []

            def operate() -> None:
                with psycopg.connect(db_url, autocommit=True) as c:
                    results.append(dl.skip(c, [dead["b"]], schema=SCHEMA))
                    selection = dl.Selection(ids=(dead["d"],))
                    results.append(rp.replay(c, schema=SCHEMA, selection=selection))

            threads = [threading.Thread(target=operate) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            wait_until(lambda: by_state(db_url, "state <> 'dead'") == {"delivered": 3 * n - 1},
                       30, "everything but b's event 1 delivered")
        finally:
            for p in procs:
                p.kill()
                p.wait(10)
    skips = [r for r in results if isinstance(r, dl.SkipResult)]
    assert sorted(len(r.skipped) for r in skips) == [0, 1]
    replays = [r for r in results if isinstance(r, rp.ReplayResult)]
    assert sorted(r.replayed for r in replays) == [0, 1]
    assert rx.sequence("b") == rx.sequence("d") == list(range(n))
    assert rx.counts()[str(events["b"][1])] == 1 and rx.counts()[str(events["d"][1])] == 2
    assert max(rx.counts()[str(e)] for e in events["b"][2:] + events["d"][2:]) == 1


def test_skip_refusals_write_nothing(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(DeliveryNotFound):
            dl.skip(c, [123456], schema=SCHEMA)
        with pytest.raises(DeliveryNotFound):
            dl.skip(c, ["x"], schema=SCHEMA)
    add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    [event] = emit_keyed(db_url, [("k", 0)])
    did = delivery_of(db_url, event)
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(OperationRefused):
            dl.skip(c, [did], schema=SCHEMA)
        c.execute(f"UPDATE {SCHEMA}.deliveries SET state = 'pending' WHERE id = %s", (did,))
        c.execute(f"UPDATE {SCHEMA}.deliveries SET state = 'dead' WHERE id = %s", (did,))
        with pytest.raises(DeliveryNotFound):  # another tenant's event: not found in scope
            dl.skip(c, [did], schema=SCHEMA, tenant="acme")
        before = c.execute(f"SELECT count(*) FROM {SCHEMA}.delivery_attempts").fetchone()
        assert before == (0,)
        assert dl.skip(c, [did], schema=SCHEMA) == dl.SkipResult([did], [])


def test_an_emit_open_across_the_heads_completion_is_not_stranded(db_url: str) -> None:
    """The race a head pointer must survive: a transaction emits for a key while the key's
    head is delivered, and commits after. Its events are delivered, after the head."""
    with ByEvent() as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        emit_keyed(db_url, [("k", 0)])
        with psycopg.connect(db_url) as late:
            outbox.emit(late, outbox.Event("order.changed", {"key": "k", "n": 1}, key="k"))
            run_until(settings(db_url), lambda: rx.got("k") == {0})
            late.commit()
        emit_keyed(db_url, [("k", 2)])
        run_until(settings(db_url), lambda: all_delivered(db_url))
        assert rx.sequence("k") == [0, 1, 2]


def _complete_params(job: Any) -> dict[str, Any]:
    return {"ids": [job[0]], "tokens": [job[2]], "states": ["delivered"], "delays": [0.0],
            "refunds": [0], "statuses": [200], "errors": [None], "outcomes": ["delivered"],
            "attempts": [job[1]], "durations": [1.0], "classes": [None], "excerpts": [None],
            "gone": [], "worker": "test", "failing_after": 10}


def test_a_completion_racing_a_placement_never_strands_the_key(db_url: str) -> None:
    """The write skew a head pointer must survive, forced step by step: the completion of
    key k's head starts (its snapshot is taken), a new event of k commits, a claim places
    it while the head still looks pending (so it is put 'waiting'), then the completion
    records the head delivered. The new event must become k's head, not wait for ever."""
    add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    emit_keyed(db_url, [("k", 0)])
    claim, complete = render(dq.CLAIM, SCHEMA), render(dq.COMPLETE, SCHEMA)

    def claim_once(c: psycopg.Connection[Any]) -> list[Any]:
        return claimed_rows(c.execute(claim.encode(), {
            "limit": 10, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED}).fetchall())

    with psycopg.connect(db_url, autocommit=True) as c, \
            psycopg.connect(db_url) as holder, psycopg.connect(db_url, autocommit=True) as w:
        assert claim_once(c) == []  # places event 0: it becomes k's head
        [head] = claim_once(c)
        # hold the head's row so that the completion, once started, waits on it
        holder.execute(f"SELECT 1 FROM {SCHEMA}.deliveries WHERE id = %s FOR SHARE",
                       (head[0],))
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(
            w.execute(complete.encode(), _complete_params(head)).fetchone()))
        t.start()
        wait_until(lambda: rows(db_url, "SELECT count(*) FROM pg_stat_activity WHERE"
                                        " wait_event_type = 'Lock' AND query LIKE %s",
                                ("%WITH r AS%",)) == [(1,)], 10, "the completion to wait")
        [late] = emit_keyed(db_url, [("k", 1)])  # commits after the completion's snapshot
        assert claim_once(c) == []  # places it: the head still looks pending
        assert by_state(db_url, "key = 'k'") == {"pending": 1, "waiting": 1}
        holder.rollback()  # the completion goes on and commits
        t.join(10)
        assert done == [(1,)]
        assert by_state(db_url, f"event_id = '{late}'") == {"pending": 1}  # k's head now


def test_concurrent_emits_for_one_key(db_url: str) -> None:
    """Two open transactions emit for one key, interleaved: each one's events keep their
    order; a transaction that begins after both committed goes after both; one key never
    has two heads (the unique index would fail the statement)."""
    with ByEvent() as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        emit_keyed(db_url, [("k", 0)])  # committed first: first
        with psycopg.connect(db_url) as t1, psycopg.connect(db_url) as t2:
            def one(c: psycopg.Connection[Any], n: int) -> None:
                outbox.emit(c, outbox.Event("order.changed", {"key": "k", "n": n}, key="k"))

            one(t1, 10)
            one(t2, 20)
            one(t1, 11)
            one(t2, 21)
            outbox.emit_many(t2, [outbox.Event("order.changed", {"key": "k", "n": 22},
                                               key="k")])
            t2.commit()
            one(t1, 12)
            t1.commit()
        emit_keyed(db_url, [("k", 30)])  # after both: last
        run_until(settings(db_url), lambda: all_delivered(db_url))
    seq = rx.sequence("k")
    assert seq[0] == 0 and seq[-1] == 30 and sorted(seq) == [0, 10, 11, 12, 20, 21, 22, 30]
    assert [n for n in seq if 10 <= n < 20] == [10, 11, 12]
    assert [n for n in seq if 20 <= n < 30] == [20, 21, 22]
    assert len(rx.counts()) == 8 and not rx.duplicates()


def test_endpoint_ordered_flag_via_cli_and_library(db_url: str) -> None:
    env = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"}
    added = invoke(db_url, "endpoints", "add", "http://127.0.0.1:9/x", "--ordered", env=env)
    assert added.exit_code == 0, added.output
    eid = added.output.split()[1]
    listed = json.loads(invoke(db_url, "endpoints", "list", "--json").output)
    assert [e["ordered"] for e in listed] == [True]
    off = invoke(db_url, "endpoints", "update", eid, "--unordered")
    assert off.exit_code == 0 and "ordered:     no" in off.output, off.output
    on = invoke(db_url, "endpoints", "update", eid, "--ordered", "--json")
    assert json.loads(on.output)["ordered"] is True
    with psycopg.connect(db_url, autocommit=True) as c:
        from outbox.admin import endpoints as ep
        from outbox.errors import InvalidEndpoint
        with pytest.raises(InvalidEndpoint):
            ep.add(c, "http://127.0.0.1:9/y", schema=SCHEMA, ordered="yes")  # type: ignore[arg-type]
        assert [e.url for e in ep.list_all(c, schema=SCHEMA)] == ["http://127.0.0.1:9/x"]


def test_claim_ignores_a_long_queue_behind_a_retrying_head(db_url: str) -> None:
    """50,000 deliveries wait behind one key's retrying head, 18,000 more behind the dead
    heads of 2,000 keys: the claim's plan and the rows it reads do not follow them."""
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    other = add_endpoint(db_url, "http://127.0.0.1:9/p")
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"INSERT INTO {SCHEMA}.events (id, type, payload, key)"
                  " SELECT gen_random_uuid(), 'x', '{}', NULL"
                  " FROM generate_series(1, 70010) g")
        c.execute(f"""
            INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id, key, state, visible_at)
            SELECT id, CASE WHEN n > 70000 THEN %(other)s ELSE %(ep)s END,
                   CASE WHEN n > 70000 THEN NULL WHEN n BETWEEN 2002 AND 52001 THEN 'key0'
                        ELSE 'key' || (n %% 2001) END,
                   CASE WHEN n > 70000 THEN 'pending'
                        WHEN n <= 2001 AND n %% 2001 = 0 THEN 'pending'
                        WHEN n <= 2001 THEN 'dead' ELSE 'waiting' END,
                   CASE WHEN n <= 2001 THEN now() + interval '1 hour' ELSE now() END
              FROM (SELECT id, row_number() OVER () AS n FROM {SCHEMA}.events) e""",
                  {"ep": endpoint, "other": other})
        c.execute(f"ANALYZE {SCHEMA}.deliveries")
        claim = render(dq.CLAIM, SCHEMA)
        params = {"limit": 10, "lease": 30.0, "token": uuid.uuid4(), **UNBUDGETED}
        with c.transaction(force_rollback=True):
            plan = "\n".join(r[0] for r in c.execute(
                ("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + claim).encode(), params))
        with c.transaction(force_rollback=True):
            claimed = c.execute(claim.encode(), params).fetchall()
    # deliveries is partitioned (migrations/0018): a scan of an empty partition (one made
    # ahead, cost 0.00..0.00) reads nothing; every other partition is read by index
    scans = [line for line in plan.splitlines()
             if re.search(r"Seq Scan on deliveries|Bitmap Heap Scan", line)
             and "cost=0.00..0.00 " not in line]
    assert not scans, plan
    assert re.search(r"Index Scan using deliveries_(p\d+|legacy)_fresh", plan), plan
    largest = max(int(n) for n in re.findall(r"actual rows=(\d+)", plan))
    assert largest <= 100, plan  # never a key's queue (50,000) nor the dead heads (2,000)
    assert len(claimed) == 10 and {r[7] for r in claimed} == {other}
