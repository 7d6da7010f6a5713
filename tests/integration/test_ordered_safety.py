"""Ordered endpoints, the guards: READ COMMITTED only, a placement bounded by the
claim, key locks taken in their own order and tried (not waited for) by the claim, and the
repair of a key left without a head."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from outbox._db.connection import render
from outbox.admin import deadletter as dl
from outbox.delivery import queries as dq
from outbox.delivery.retention_task import RepairPosition, repair_once
from outbox.delivery.store import Store
from outbox.errors import OperationRefused
from tests.integration.test_ordered import (
    ByEvent,
    _complete_params,
    all_delivered,
    by_state,
    delivery_of,
    emit_keyed,
)
from tests.support.pg import SCHEMA, UNBUDGETED, claimed_rows
from tests.support.workers import add_endpoint, rows, run_until, settings, wait_until

# hashtext('order-221716') = hashtext('order-313556'): one advisory lock for two keys
COLLIDING = ("order-221716", "order-313556")


def _claim(c: psycopg.Connection[Any], limit: int = 10) -> list[Any]:
    return claimed_rows(c.execute(render(dq.CLAIM, SCHEMA).encode(),
                                  {"limit": limit, "lease": 30.0, "token": uuid.uuid4(),
                                   **UNBUDGETED}).fetchall())


def _repeatable_read_by_default(db_url: str) -> None:
    name = conninfo_to_dict(db_url)["dbname"]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"ALTER DATABASE \"{name}\""
                  " SET default_transaction_isolation = 'repeatable read'")


def test_the_functions_refuse_other_isolation_levels(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    for level in ("REPEATABLE READ", "SERIALIZABLE"):
        for call in (f"{SCHEMA}.ordered_next(%s, 'k')", f"{SCHEMA}.ordered_advance(%s, 'k')",
                     f"{SCHEMA}.ordered_place(%s, 'k', '{{}}')"):
            with psycopg.connect(db_url) as c:
                c.execute(f"BEGIN ISOLATION LEVEL {level}")
                with pytest.raises(psycopg.errors.FeatureNotSupported,
                                   match=f"needs READ COMMITTED, not {level}"):
                    c.execute(f"SELECT {call}", (endpoint,))


def test_the_worker_pins_read_committed(db_url: str) -> None:
    """A database whose default is REPEATABLE READ: the worker's connections run READ
    COMMITTED, and the race that strands a key under REPEATABLE READ (a completion racing
    a placement) is survived by a real worker."""
    _repeatable_read_by_default(db_url)

    async def level() -> str:
        store = Store(settings(db_url))
        await store.open()
        try:
            async with store.connections.transaction() as conn:
                cur = await conn.execute("SHOW transaction_isolation")
            row = await cur.fetchone()
            return str(row[0]) if row else ""
        finally:
            await store.close()

    assert asyncio.run(level()) == "read committed"
    with ByEvent(flaky=0.3) as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        emit_keyed(db_url, [(k, n) for n in range(8) for k in "abc"])
        run_until(settings(db_url, batch_size=5), lambda: all_delivered(db_url), timeout=60)
        for k in "abc":
            assert rx.sequence(k) == list(range(8))


def test_skip_runs_read_committed_or_refuses(db_url: str) -> None:
    _repeatable_read_by_default(db_url)
    add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    events = emit_keyed(db_url, [("k", 0), ("k", 1)])
    head, second = (delivery_of(db_url, e) for e in events)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("SET default_transaction_isolation = 'read committed'")
        _claim(c)  # places: head pending, second waiting
        c.execute(f"UPDATE {SCHEMA}.deliveries SET state = 'dead' WHERE id = %s", (head,))
    with psycopg.connect(db_url) as c:  # REPEATABLE READ by default
        c.execute("SELECT 1")  # the caller's transaction is open
        with pytest.raises(OperationRefused, match="READ COMMITTED"):
            dl.skip(c, [head], schema=SCHEMA)
        c.rollback()
        assert rows(db_url, f"SELECT key FROM {SCHEMA}.deliveries WHERE id = %s",
                    (head,)) == [("k",)]  # refused: nothing written
        assert dl.skip(c, [head], schema=SCHEMA) == dl.SkipResult([head], [])  # its own
        c.commit()
    assert by_state(db_url, f"id = {second}") == {"pending": 1}


def test_placement_touches_only_the_rows_the_claim_picked(db_url: str) -> None:
    """5,000 fresh deliveries over 500 keys, 10 each: a claim of 10 places its oldest 100
    fresh rows (100 keys, one each) and updates nothing else; the rest stay fresh."""
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(f"INSERT INTO {SCHEMA}.events (id, type, payload, key)"
                  " SELECT gen_random_uuid(), 'x', '{}', NULL FROM generate_series(1, 5000)")
        c.execute(f"""
            INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id, key, state)
            SELECT id, %s, 'key' || (n %% 500), 'fresh'
              FROM (SELECT id, row_number() OVER (ORDER BY id) AS n
                      FROM {SCHEMA}.events) e ORDER BY n""", (endpoint,))
        c.execute(f"ANALYZE {SCHEMA}.deliveries")
        with c.transaction(force_rollback=True):
            assert _claim(c) == []
            [(updated, fetched, seq_read)] = c.execute(
                # summed over the partitions of deliveries (migrations/0018)
                "SELECT sum(n_tup_upd), sum(idx_tup_fetch), sum(seq_tup_read)"
                " FROM pg_stat_xact_user_tables WHERE relid IN (SELECT inhrelid"
                " FROM pg_inherits WHERE inhparent = %s::regclass)",
                (f"{SCHEMA}.deliveries",)).fetchall()
            assert by_state(db_url) == {"fresh": 5000}  # (rolled back: not visible yet)
            placed: dict[str, int] = dict(c.execute(
                f"SELECT state, count(*) FROM {SCHEMA}.deliveries GROUP BY 1").fetchall())
    assert placed == {"pending": 100, "fresh": 4900}
    assert updated == 100, updated  # each picked row once; no key's other rows
    assert seq_read == 0 and fetched <= 600, (fetched, seq_read)


def test_claim_passes_over_a_busy_key(db_url: str) -> None:
    """A key whose lock another transaction holds: the claim does not wait for it (its rows
    stay fresh) and places the other keys; the next claim places it."""
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    emit_keyed(db_url, [("busy", 0), ("free", 0)])
    with psycopg.connect(db_url, autocommit=True) as holder, \
            psycopg.connect(db_url, autocommit=True) as c:
        holder.execute("SELECT pg_advisory_lock(hashtext('outbox.ordered:' || %s::text),"
                       " hashtext('busy'))", (endpoint,))
        c.execute("SET statement_timeout = '5s'")
        assert _claim(c) == []
        assert by_state(db_url, "key = 'busy'") == {"fresh": 1}
        assert by_state(db_url, "key = 'free'") == {"pending": 1}
        holder.execute("SELECT pg_advisory_unlock_all()")
        assert len(_claim(c)) == 1  # free's head
        assert by_state(db_url, "key = 'busy'") == {"pending": 1}


def test_completion_takes_colliding_keys_in_lock_order(db_url: str) -> None:
    """Keys whose lock collides (COLLIDING) must be locked in the lock's own order, else
    two completions can deadlock. A completion of the heads of 'order-221716' and
    'order-25' (whose lock sorts first) waits for 'order-25''s lock while holding nothing."""
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/o", ordered=True)
    low = "order-25"
    emit_keyed(db_url, [(COLLIDING[0], 0), (low, 0)])
    with psycopg.connect(db_url, autocommit=True) as c:
        assert c.execute("SELECT hashtext(%s) = hashtext(%s), hashtext(%s) < hashtext(%s)",
                         (*COLLIDING, low, COLLIDING[0])).fetchone() == (True, True)
        _claim(c)
        heads = _claim(c)
        assert len(heads) == 2
        params: dict[str, Any] = {k: [v for h in heads for v in _complete_params(h)[k]]
                                  for k in _complete_params(heads[0])
                                  if k not in ("gone", "worker", "failing_after")}
        params.update(gone=[], worker="test", failing_after=10)
    lock = "hashtext('outbox.ordered:' || %s::text), hashtext(%s)"
    with psycopg.connect(db_url, autocommit=True) as holder, \
            psycopg.connect(db_url, autocommit=True) as w, \
            psycopg.connect(db_url, autocommit=True) as probe:
        holder.execute(f"SELECT pg_advisory_lock({lock})", (endpoint, low))
        done: list[Any] = []
        t = threading.Thread(target=lambda: done.append(
            w.execute(render(dq.COMPLETE, SCHEMA).encode(), params).fetchone()))
        t.start()
        wait_until(lambda: rows(db_url, "SELECT count(*) FROM pg_stat_activity WHERE"
                                        " wait_event_type = 'Lock' AND query LIKE %s",
                                ("%WITH r AS%",)) == [(1,)], 10, "the completion to wait")
        free = probe.execute(f"SELECT pg_try_advisory_lock({lock})",
                             (endpoint, COLLIDING[1])).fetchone()
        probe.execute("SELECT pg_advisory_unlock_all()")
        holder.execute("SELECT pg_advisory_unlock_all()")
        t.join(10)
    assert free == (True,)  # the colliding key's lock was not taken before the lower one
    assert done == [(2,)]


def test_a_headless_key_is_repaired(db_url: str) -> None:
    """A key with waiting deliveries and no head (an old worker completed the head, or a
    manual UPDATE): the repair pass gives it a head, and the worker delivers it in order."""
    with ByEvent() as rx:
        add_endpoint(db_url, rx.url + "/o", ordered=True)
        events = emit_keyed(db_url, [(k, n) for n in range(3) for k in ("a", "b", "c")])
        with psycopg.connect(db_url, autocommit=True) as c:
            _claim(c, 100)  # heads pending, the rest waiting
            c.execute(f"UPDATE {SCHEMA}.deliveries SET state = 'delivered'"
                      " WHERE state = 'pending' AND key IN ('a', 'b')")  # no promotion
        assert by_state(db_url, "key IN ('a', 'b')") == {"delivered": 2, "waiting": 4}
        position = RepairPosition()
        assert repair_once(settings(db_url), position, keys=2) == 2  # a and b (c has one)
        assert position.key == "b"
        assert repair_once(settings(db_url), position, keys=2) == 0  # c: has its head
        assert position == RepairPosition()  # reached the end: starts over next time
        assert repair_once(settings(db_url), position) == 0  # idempotent
        run_until(settings(db_url), lambda: by_state(db_url, "state <> 'delivered'") == {})
        assert rx.sequence("a") == rx.sequence("b") == [1, 2]
        assert rx.sequence("c") == [0, 1, 2]
    assert len(events) == 9


def test_the_functions_resolve_names_in_their_schema_only(db_url: str) -> None:
    got = rows(db_url, "SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_namespace n"
                       " ON n.oid = p.pronamespace WHERE n.nspname = %s"
                       " AND p.proname LIKE 'ordered%%' ORDER BY 1", (SCHEMA,))
    assert [name for name, _ in got] == ["ordered_advance", "ordered_check_isolation",
                                         "ordered_next", "ordered_place",
                                         "ordered_promote_if_headless"]
    configs = {name: set(config) for name, config in got}
    assert all(f"search_path={SCHEMA}, pg_catalog" in c for c in configs.values())
    # and the claim's placement chooses its own plans (migrations/0026)
    assert configs["ordered_place"] == {f"search_path={SCHEMA}, pg_catalog",
                                        "plan_cache_mode=auto"}
