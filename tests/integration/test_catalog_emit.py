"""Emit checks payloads against the event catalog on every stack, before any write.

The matrix of tests/support/stacks.py (psycopg 3 sync/async, psycopg2 connection/cursor,
asyncpg connection/pool connection, SQLAlchemy sessions and connections on each driver);
Django's two backends run the ``catalog`` scenario of tests/django_project.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outbox import Event, InvalidEvent, Settings
from outbox._emit import catalog
from outbox.admin import types
from tests.integration.test_emit_stacks_django import manage
from tests.support.pg import SCHEMA, count
from tests.support.stacks import STACKS, Stack

INVOICE = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0},
                   "lines": {"type": "array", "items": {"type": "object", "properties": {
                       "sku": {"type": "string"}}, "required": ["sku"]}}},
    "required": ["amount"],
}


def register(url: str, name: str = "invoice.paid", schema: Any = INVOICE) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        types.add(c, name, schema=SCHEMA, json_schema=schema, example={"amount": 1})


@pytest.fixture(params=STACKS, ids=[s.name for s in STACKS])
def stack(request: pytest.FixtureRequest, db_url: str) -> Iterator[Stack]:
    register(db_url)
    catalog.forget()
    with request.param(db_url) as s:
        yield s


@pytest.mark.parametrize("refresh", [0.0, 60.0])
def test_bad_payload_is_refused_with_its_path_and_nothing_written(
        db_url: str, stack: Stack, refresh: float) -> None:
    """refresh 0: every emit re-reads the catalog version on the stack's own connection;
    60: the first emit reads it, the others use the process's copy."""
    s = Settings(database_url=db_url, schema_name=SCHEMA, catalog_refresh_seconds=refresh)
    with pytest.raises(InvalidEvent, match=r"'invoice.paid'.*at \$\.amount: .*integer"):
        stack.emit(Event("invoice.paid", {"amount": "12"}), settings=s)
    with pytest.raises(InvalidEvent, match=r"at \$\.lines\[1\]: .*sku"):
        stack.emit_many([Event("invoice.paid", {"amount": 1}),
                         Event("invoice.paid", {"amount": 1, "lines": [{"sku": "a"}, {}]})],
                        settings=s)
    good = stack.emit(Event("invoice.paid", {"amount": 3}), settings=s)
    many = stack.emit_many([Event("invoice.paid", {"amount": i}) for i in range(2)]
                           + [Event("other.type", {"free": True})], settings=s)
    stack.commit()
    assert type(good) is uuid.UUID and len(many) == 3
    assert count(db_url, "events") == 4  # the refused emits wrote nothing


def test_django_backends_refuse_a_bad_payload(db_url: str) -> None:
    for driver in ("psycopg", "psycopg2"):
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("DELETE FROM outbox.events")
            c.execute("DELETE FROM outbox.event_types")
        manage(db_url, driver, "migrate", "--no-input")
        register(db_url)
        seen = manage(db_url, driver, "emit_scenarios", "catalog")
        refused = "InvalidEvent: payload of 'invoice.paid' does not match its schema at $.amount"
        assert refused in seen
        assert "at $: " in seen and "amount" in seen  # emit_many: the whole-object error
        assert count(db_url, "events") == 1, driver
