"""Operational events at the database: the reserved type prefix, bad input refused with
nothing written, op_insert's guard, uuid7()."""

from __future__ import annotations

import uuid

import psycopg
import pytest

import outbox
from outbox.admin import endpoints as ep
from outbox.errors import InvalidEndpoint, InvalidEvent
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, rows


def test_emit_refuses_the_reserved_prefix_and_writes_nothing(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        with pytest.raises(InvalidEvent, match="reserved"):
            outbox.emit(c, outbox.Event("outbox.delivery.dead", {"fake": True}))
        with pytest.raises(InvalidEvent, match="reserved"):
            outbox.emit_many(c, [outbox.Event("a.b", {}), outbox.Event("outbox.x", {})])
        c.commit()
    assert rows(db_url, "SELECT count(*) FROM outbox.events") == [(0,)]


def test_set_enabled_refuses_an_unknown_actor_and_changes_nothing(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(db_url, autocommit=True) as c, pytest.raises(InvalidEndpoint,
                                                                      match="actor"):
        ep.set_enabled(c, endpoint, False, schema=SCHEMA, actor="robot")
    assert rows(db_url, "SELECT enabled FROM outbox.endpoints") == [(True,)]
    assert rows(db_url, "SELECT count(*) FROM outbox.events") == [(0,)]


def test_op_insert_writes_operational_types_only(db_url: str) -> None:
    with psycopg.connect(db_url) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT * FROM outbox.op_insert(%s::json)",
                  ('[{"type": "outbox.a", "data": {}}, {"type": "invoice.paid", "data": {}}]',))
    assert rows(db_url, "SELECT count(*) FROM outbox.events") == [(0,)]


def test_uuid7_is_version_7_and_ordered_by_time(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        first = c.execute("SELECT outbox.uuid7()").fetchone()
        c.execute("SELECT pg_sleep(0.002)")
        second = c.execute("SELECT outbox.uuid7()").fetchone()
    assert first and second
    a, b = uuid.UUID(str(first[0])), uuid.UUID(str(second[0]))
    assert a.version == b.version == 7 and a.variant == uuid.RFC_4122
    assert a < b
