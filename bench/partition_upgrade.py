"""The upgrade window of migration 0018 (partitioned history) on a populated database.

    .venv/bin/python -m bench.partition_upgrade [--rows 300000]

In a scratch database migrated up to the last migration before 0018: ``--rows`` deliveries
(a fifth pending, the rest delivered) with one attempt-log row each, then ``outbox migrate``
times the rest. The window is the time migration 0018 holds ACCESS EXCLUSIVE on deliveries
and delivery_attempts (its whole transaction): emits and claims wait that long, none fails.
Also measured: the same with the CHECK constraints validated beforehand (the migration's
comment), which leaves only catalog work in the window.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.common import SCHEMA, emit_json, scratch_database
from outbox.admin import migrations as mg

FILL = """
WITH ev AS (
    INSERT INTO outbox.events (id, type, payload)
    SELECT gen_random_uuid(), 't', '{}' FROM generate_series(1, %(n)s) RETURNING id),
d AS (
    INSERT INTO outbox.deliveries (event_id, endpoint_id, state, attempts, finished_at)
    SELECT id, gen_random_uuid(),
           CASE WHEN random() < 0.2 THEN 'pending' ELSE 'delivered' END, 1, now() FROM ev
    RETURNING id)
INSERT INTO outbox.delivery_attempts (delivery_id, attempt, outcome)
SELECT id, 1, 'delivered' FROM d
"""
PREVALIDATE = """
ALTER TABLE outbox.deliveries ADD CONSTRAINT deliveries_legacy_bound
    CHECK (id < 4294967296) NOT VALID;
ALTER TABLE outbox.deliveries VALIDATE CONSTRAINT deliveries_legacy_bound;
ALTER TABLE outbox.delivery_attempts ADD CONSTRAINT delivery_attempts_legacy_bound
    CHECK (delivery_id < 4294967296) NOT VALID;
ALTER TABLE outbox.delivery_attempts VALIDATE CONSTRAINT delivery_attempts_legacy_bound
"""


_EVERY = mg.available


def _upto(version: int) -> Callable[..., list[mg.Migration]]:
    """``outbox.admin.migrations.available`` as if the last migration were ``version``."""
    chosen = [m for m in _EVERY() if m.version <= version]

    def available(*, inbox: bool = False) -> list[mg.Migration]:
        return _EVERY(inbox=True) if inbox else chosen
    return available


def _window(rows: int, prevalidate: bool) -> float:
    # scratch_database migrates everything: start again from a fresh schema
    with scratch_database() as blank, psycopg.connect(blank, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {SCHEMA} CASCADE".encode())
        setattr(mg, "available", _upto(17))  # noqa: B010
        try:
            mg.migrate(c, SCHEMA)
        finally:
            setattr(mg, "available", _EVERY)  # noqa: B010
        c.execute(FILL.encode(), {"n": rows})
        c.execute(b"VACUUM ANALYZE outbox.deliveries, outbox.delivery_attempts")
        if prevalidate:
            for statement in PREVALIDATE.split(";"):
                c.execute(statement.encode())
        setattr(mg, "available", _upto(18))  # noqa: B010
        try:
            started = time.perf_counter()
            applied = mg.migrate(c, SCHEMA)
            took = time.perf_counter() - started
        finally:
            setattr(mg, "available", _EVERY)  # noqa: B010
        assert [m.version for m in applied] == [18]
        got = c.execute(b"SELECT count(*) FROM outbox.deliveries").fetchone()
        assert got == (rows,)
    return took


def run(rows: int, repeat: int) -> dict[str, Any]:
    plain = sorted(_window(rows, False) for _ in range(repeat))
    pre = sorted(_window(rows, True) for _ in range(repeat))
    return {"rows": rows, "window_s": plain, "median_s": plain[len(plain) // 2],
            "prevalidated_window_s": pre, "prevalidated_median_s": pre[len(pre) // 2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    res = run(args.rows, args.repeat)
    runs = ", ".join(f"{x:.2f}" for x in res["window_s"])
    print(f"migration 0018 on {res['rows']:,} deliveries + {res['rows']:,} attempt rows:"
          f" median {res['median_s']:.2f} s (runs {runs})")
    print(f"the same with the CHECKs validated beforehand: median "
          f"{res['prevalidated_median_s']:.2f} s")
    emit_json("partition_upgrade", res)


if __name__ == "__main__":
    main()
