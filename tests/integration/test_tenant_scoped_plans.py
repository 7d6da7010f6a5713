"""A small tenant's dead-letter plan and per-endpoint stats cost its own endpoints' rows,
not every tenant's: another tenant's 20,000 dead and recently finished deliveries cost no
probe of their events (outbox._db.queries.operations: DEAD_SUMMARY_TENANT, _carried)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from outbox.admin import deadletter as dl
from outbox.admin import endpoints as ep
from outbox.admin import replay as rp
from outbox.admin import stats as st
from tests.support.pg import SCHEMA

BIG = 20_000


def _populate(c: psycopg.Connection[Any]) -> None:
    small = ep.add(c, "http://127.0.0.1:9/small", schema=SCHEMA, tenant="small").endpoint.id
    big = ep.add(c, "http://127.0.0.1:9/big", schema=SCHEMA, tenant="big").endpoint.id
    shared = ep.add(c, "http://127.0.0.1:9/all", schema=SCHEMA, all_tenants=True).endpoint.id
    for tenant, endpoint, n in (("big", big, BIG), ("small", small, 40),
                                ("small", shared, 10), ("big", shared, 10)):
        c.execute(f"""
            WITH ev AS (
                INSERT INTO {SCHEMA}.events (id, type, payload, tenant)
                SELECT gen_random_uuid(), 't', '{{}}', %(tenant)s FROM generate_series(1, %(n)s)
                RETURNING id)
            INSERT INTO {SCHEMA}.deliveries
                (event_id, endpoint_id, state, attempts, finished_at, last_error)
            SELECT id, %(ep)s, CASE WHEN random() < 0.5 THEN 'dead' ELSE 'delivered' END, 1,
                   now() - interval '10 minutes', 'boom'
              FROM ev""", {"tenant": tenant, "ep": endpoint, "n": n})
    c.execute(f"ANALYZE {SCHEMA}.deliveries, {SCHEMA}.events, {SCHEMA}.endpoints")


def _event_probes(c: psycopg.Connection[Any], run: Callable[[], Any]) -> tuple[Any, int]:
    """``run()``'s result and the rows it fetched from events, in one transaction."""
    with c.transaction(force_rollback=True):
        result = run()
        row = c.execute("SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables"
                        " WHERE relid = %s::regclass", (f"{SCHEMA}.events",)).fetchone()
    return result, int(row[0]) if row else 0


def test_a_small_tenants_plan_and_stats_skip_other_tenants_rows(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        _populate(c)
        plan, probes = _event_probes(c, lambda: rp.plan_replay(
            c, schema=SCHEMA, selection=dl.Selection(tenant="small")))
        assert plan.total == sum(
            1 for _ in c.execute(f"SELECT 1 FROM {SCHEMA}.deliveries d JOIN {SCHEMA}.events e"
                                 " ON e.id = d.event_id WHERE e.tenant = 'small'"
                                 " AND d.state = 'dead'"))
        assert probes <= 100, probes  # its 50 rows and the shared endpoint's 10 others
        figures, probes = _event_probes(c, lambda: st.by_endpoint(c, schema=SCHEMA,
                                                                   tenant="small"))
        assert sorted(f.dead_1h + f.delivered_1h for f in figures) == [10, 40]
        assert probes <= 300, probes  # never the big tenant's 20,000
