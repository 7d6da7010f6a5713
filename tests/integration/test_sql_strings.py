"""SQL-looking input is data: stored and returned intact (parameterised queries only)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import psycopg

import outbox
from outbox import Event
from outbox.admin import endpoints as ep
from outbox.testing.receiver import Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import drain, settings

NASTY = [
    "'; DROP TABLE outbox.events; --",
    "\" OR 1=1 --",
    "Robert'); DELETE FROM outbox.deliveries; --",
    "$1 %s %(x)s {schema} \\x00 ${PATH}",
    "ünïcødé ' \" ` ; \u2028",
]


def test_sql_strings_round_trip_through_emit_and_delivery(db_url: str) -> None:
    count_tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'outbox'"
    with psycopg.connect(db_url) as c:
        before = c.execute(count_tables).fetchone()
    with Receiver() as rx:
        with psycopg.connect(db_url, autocommit=True) as c:
            endpoint = ep.add(
                c, rx.url + "/x?q=%27%20OR%20%271%27=%271;--", schema=SCHEMA, description=NASTY[0],
                headers={"X-Note": NASTY[2]}, event_types=["x"],
            ).endpoint
        payload: dict[str, Any] = {"values": NASTY, NASTY[1]: NASTY[3]}
        with psycopg.connect(db_url) as c:
            first = outbox.emit(c, Event("x", payload, key=NASTY[4],
                                         idempotency_key=NASTY[0]))
            again = outbox.emit(c, Event("x", {}, idempotency_key=NASTY[0]))
            c.commit()
        assert first == again
        drain(settings(db_url))
        assert rx.wait_for(1, 5)
    (got,) = rx.received
    assert json.loads(got.body) == payload
    assert got.headers["x-note"] == NASTY[2]
    assert unquote(got.path) == "/x?q=' OR '1'='1;--"  # httpx may unescape the quotes
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT key, idempotency_key FROM outbox.events").fetchone()
        stored = ep.get(c, endpoint.id, schema=SCHEMA)
        tables = c.execute(count_tables).fetchone()
    assert row == (NASTY[4], NASTY[0])
    assert stored.description == NASTY[0]
    assert tables == before  # nothing dropped
