"""The upgrade windows of migrations 0018 (partitioned deliveries) and 0025 (partitioned
events) on a populated database.

    .venv/bin/python -m bench.partition_upgrade [--rows 300000] [--repeat 3]

0018: in a scratch database migrated up to 0017, ``--rows`` deliveries (a fifth pending, the
rest delivered) with one attempt-log row each, then ``outbox migrate`` times 0018 alone: the
time it holds ACCESS EXCLUSIVE on deliveries and delivery_attempts (its whole transaction):
emits and claims wait that long, none fails. 0025: migrated up to 0024, ``--rows`` events
(UUIDv7 ids over the last hour, a tenth with an idempotency key) with a delivery each, then
0025 alone (ACCESS EXCLUSIVE on events). Each also with its CHECK validated beforehand (the
migration's comment), which leaves only catalog work (and, for 0025, the copy of the keys)
in the window.
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
# UUIDv7-like ids spread over the last hour (the first 48 bits: a millisecond), a tenth keyed.
FILL_EVENTS = """
WITH ev AS (
    INSERT INTO outbox.events (id, type, payload, idempotency_key)
    SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint - 3600000 + i), 12, '0')
            || '7000' || '8000' || lpad(to_hex(i), 12, '0'))::uuid, 't', '{}',
           CASE WHEN i %% 10 = 0 THEN 'key-' || i END
      FROM generate_series(1, %(n)s) i RETURNING id)
INSERT INTO outbox.deliveries (event_id, endpoint_id, state, attempts, finished_at)
SELECT id, gen_random_uuid(), 'delivered', 1, now() FROM ev
"""
# B ten minutes ahead, in UUIDv7 form (migrations/0025_partitioned_events.sql's comment)
PREVALIDATE_EVENTS = (
    "DO $$ BEGIN EXECUTE format('ALTER TABLE outbox.events ADD CONSTRAINT"
    " events_legacy_bound CHECK (id < %L) NOT VALID', (lpad(to_hex((extract(epoch FROM now()"
    " + interval '10 minutes') * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid);"
    " END $$",
    "ALTER TABLE outbox.events VALIDATE CONSTRAINT events_legacy_bound",
)
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


# migration -> (the fill before it, the statements validating its CHECK beforehand, the
# table it converts)
_CASES: dict[int, tuple[str, tuple[str, ...], str]] = {
    18: (FILL, tuple(PREVALIDATE.split(";")), "deliveries"),
    25: (FILL_EVENTS, PREVALIDATE_EVENTS, "events"),
}


def _window(rows: int, prevalidate: bool, version: int = 18) -> float:
    fill, pre, table = _CASES[version]
    # scratch_database migrates everything: start again from a fresh schema
    with scratch_database() as blank, psycopg.connect(blank, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {SCHEMA} CASCADE".encode())
        setattr(mg, "available", _upto(version - 1))  # noqa: B010
        try:
            mg.migrate(c, SCHEMA)
        finally:
            setattr(mg, "available", _EVERY)  # noqa: B010
        c.execute(fill.encode(), {"n": rows})
        c.execute(b"VACUUM ANALYZE outbox.deliveries, outbox.delivery_attempts, outbox.events")
        if prevalidate:
            for statement in pre:
                c.execute(statement.encode())
        setattr(mg, "available", _upto(version))  # noqa: B010
        try:
            started = time.perf_counter()
            applied = mg.migrate(c, SCHEMA)
            took = time.perf_counter() - started
        finally:
            setattr(mg, "available", _EVERY)  # noqa: B010
        assert [m.version for m in applied] == [version]
        got = c.execute(f"SELECT count(*) FROM outbox.{table}".encode()).fetchone()
        assert got == (rows,)
    return took


def run(rows: int, repeat: int, version: int = 18) -> dict[str, Any]:
    plain = sorted(_window(rows, False, version) for _ in range(repeat))
    pre = sorted(_window(rows, True, version) for _ in range(repeat))
    return {"migration": version, "rows": rows, "window_s": plain,
            "median_s": plain[len(plain) // 2], "prevalidated_window_s": pre,
            "prevalidated_median_s": pre[len(pre) // 2]}


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
    ev = run(args.rows, args.repeat, 25)
    runs = ", ".join(f"{x:.2f}" for x in ev["window_s"])
    print(f"migration 0025 on {ev['rows']:,} events (a tenth keyed) + as many deliveries:"
          f" median {ev['median_s']:.2f} s (runs {runs})")
    print(f"the same with the CHECK validated beforehand: median "
          f"{ev['prevalidated_median_s']:.2f} s")
    emit_json("partition_upgrade", {**res, "events": ev})


if __name__ == "__main__":
    main()
