"""outbox.admin.activity.last_hour on a real database: per-minute delivered/dead counts and
the backlog rebuilt from the rows."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import psycopg
import pytest

from outbox._db import queries
from outbox._db.connection import render
from outbox.admin import activity
from tests.support import workers
from tests.support.cli import execute
from tests.support.pg import SCHEMA


def _series(db_url: str) -> list[activity.Minute]:
    with psycopg.connect(db_url, autocommit=True) as c:
        return activity.last_hour(c, schema=SCHEMA)


def _age(db_url: str, ids: list[int], created: dt.timedelta, finished: dt.timedelta | None,
         state: str) -> None:
    params: dict[str, Any] = {"ids": ids, "c": created, "f": finished, "s": state}
    execute(db_url, f"""UPDATE {SCHEMA}.deliveries
                           SET created_at = date_trunc('minute', now()) - %(c)s,
                               finished_at = date_trunc('minute', now()) - %(f)s,
                               state = %(s)s
                         WHERE id = ANY (%(ids)s)""", params)


def test_empty_database_gives_sixty_zero_minutes(db_url: str) -> None:
    series = _series(db_url)
    assert len(series) == 60
    assert all((m.delivered, m.dead, m.backlog) == (0, 0, 0) for m in series)
    assert series[-1].minute > series[0].minute
    assert series[-1].minute - series[0].minute == dt.timedelta(minutes=59)


def test_counts_and_backlog_per_minute(db_url: str) -> None:
    workers.add_endpoint(db_url, "http://127.0.0.1:9/hook")
    workers.emit(db_url, 6)
    ids = [int(r[0]) for r in execute(db_url, f"SELECT id FROM {SCHEMA}.deliveries ORDER BY id")]
    minute = dt.timedelta(minutes=1)
    # two created 2h ago, delivered 30 min ago; one created 10 min ago, dead 5 min ago
    _age(db_url, ids[:2], 120 * minute, 30 * minute, "delivered")
    _age(db_url, ids[2:3], 10 * minute, 5 * minute, "dead")
    # one delivered long ago (outside the window: counts nowhere)
    _age(db_url, ids[3:4], 200 * minute, 90 * minute, "delivered")
    # two still pending, created 20 min ago
    execute(db_url, f"UPDATE {SCHEMA}.deliveries SET created_at = date_trunc('minute', now())"
                    " - interval '20 minutes' WHERE id = ANY (%s)", (ids[4:],))
    series = _series(db_url)
    by_ago = {59 - i: m for i, m in enumerate(series)}  # minutes before the current one
    assert by_ago[30].delivered == 2 and sum(m.delivered for m in series) == 2
    assert by_ago[5].dead == 1 and sum(m.dead for m in series) == 1
    assert by_ago[59].backlog == 2  # the two delivered at -30 were pending since -120
    assert by_ago[31].backlog == 2
    assert by_ago[30].backlog == 0  # delivered during minute -30
    assert by_ago[20].backlog == 2  # the two pending ones arrive
    assert by_ago[10].backlog == 3  # plus the one that will die
    assert by_ago[5].backlog == 2
    assert by_ago[0].backlog == 2


def _minutes(values: list[tuple[int, int, int]]) -> list[activity.Minute]:
    start = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    return [activity.Minute(start + dt.timedelta(minutes=i), *v)
            for i, v in enumerate(values)]


def test_nice_axis_tops() -> None:
    from outbox.web.chart import nice_max

    assert [nice_max(v) for v in (0, 1, 2, 3, 7, 10, 11, 99, 101, 4000)] == [
        1, 1, 2, 5, 10, 10, 20, 100, 200, 5000]


def test_rate_chart_bars_are_proportional_and_dead_is_stacked() -> None:
    from outbox.web.chart import WIDE, rate_chart

    chart = rate_chart(_minutes([(10, 0, 0), (5, 5, 0), (0, 0, 0)]))
    heights = [b.height for b in chart.bars]
    assert heights[0] == pytest.approx(2 * heights[1]) and heights[2] == 0
    (dead,) = chart.alt_bars
    assert dead.height == pytest.approx(heights[1])
    assert dead.y + dead.height == pytest.approx(chart.bars[1].y)  # on top of delivered
    assert all(0 <= b.y <= WIDE.height for b in chart.bars + chart.alt_bars)
    assert chart.summary == "15 delivered and 5 dead in the last hour"
    assert chart.y_ticks[-1].label == "10"


def test_backlog_chart_follows_the_backlog() -> None:
    from outbox.web.chart import backlog_chart

    chart = backlog_chart(_minutes([(0, 0, 4), (0, 0, 2), (0, 0, 0)]))
    ys = [float(point.split(",")[1]) for point in chart.line.split()]
    assert ys[0] < ys[1] < ys[2]  # SVG y grows downwards
    assert chart.summary == "backlog now 0, peak 4 in the last hour"
    assert [t.label for t in chart.x_ticks] == ["12:00", "12:02"]


def test_charts_of_no_minutes_are_empty() -> None:
    from outbox.web.chart import NARROW, backlog_chart, rate_chart

    for chart in (rate_chart([]), backlog_chart([], NARROW)):
        assert chart.bars == [] and chart.line == "" and chart.x_ticks == []


def test_last_hour_reads_the_partial_indexes_not_the_history(db_url: str) -> None:
    """60,000 deliveries finished two days ago, a few pending: the statement reaches rows
    through deliveries_finished and deliveries_due, never by a scan of the table."""
    endpoint = workers.add_endpoint(db_url, "http://127.0.0.1:9/x")
    execute(db_url, f"""
        INSERT INTO {SCHEMA}.events (id, type, payload)
        SELECT gen_random_uuid(), 't', '{{}}' FROM generate_series(1, 60010)""")
    execute(db_url, f"""
        INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id, state, created_at, finished_at)
        SELECT id, %s, CASE WHEN n <= 60000 THEN 'delivered' ELSE 'pending' END,
               now() - interval '2 days',
               CASE WHEN n <= 60000 THEN now() - interval '2 days' END
          FROM (SELECT id, row_number() OVER () AS n FROM {SCHEMA}.events) e""", (endpoint,))
    execute(db_url, f"ANALYZE {SCHEMA}.deliveries")
    with psycopg.connect(db_url) as c:
        row = c.execute(("EXPLAIN (FORMAT JSON) " + render(queries.CONSOLE_LAST_HOUR,
                                                           SCHEMA)).encode()).fetchone()
    assert row is not None
    plan = row[0]
    nodes = list(_nodes(plan[0]["Plan"]))
    # deliveries is partitioned (migrations/0018): a partition (deliveries_p<k>, its index
    # deliveries_p<k>_due) is read as the table and index it is part of; an empty one (made
    # ahead: cost 0) may be "scanned" for nothing
    part = re.compile(r"^deliveries_(p\d+|legacy)")
    on_deliveries = [(n["Node Type"], part.sub("deliveries", n.get("Index Name") or ""))
                     for n in nodes
                     if part.sub("deliveries", n.get("Relation Name") or "") == "deliveries"
                     and not (n["Node Type"] == "Seq Scan" and n["Total Cost"] == 0)]
    assert on_deliveries and all("Seq Scan" not in kind for kind, _ in on_deliveries), nodes
    assert {i for _, i in on_deliveries} == {"deliveries_finished", "deliveries_due"}
    # the planner knows the window's start (no 1/3-of-the-table guess that a busier table
    # would answer with a scan): it expects the 10 pending rows and none finished
    expected = [n["Plan Rows"] for n in nodes
                if part.sub("deliveries", n.get("Relation Name") or "") == "deliveries"]
    assert max(expected) < 1000, nodes
    assert sum(m.backlog for m in _series(db_url)[-1:]) == 10


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]
