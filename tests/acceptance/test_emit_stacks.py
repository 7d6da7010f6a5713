"""Emitted on each stack, delivered: through a real worker to a verifying receiver on
127.0.0.1. Also the three stack snippets of docs/guides/stacks.md,
executed as written."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from outbox import Event
from outbox.testing import Receiver, captured_events, deliver_due
from tests.integration.test_emit_stacks_django import manage
from tests.support.docs import snippet
from tests.support.pg import SCHEMA, count
from tests.support.stacks import (
    ORDERS,
    AsyncpgPool,
    Psycopg2,
    SAAsyncSession,
    SASessionPsycopg2,
    Stack,
)
from tests.support.workers import add_endpoint, rows

FAMILIES = [Psycopg2, AsyncpgPool, SASessionPsycopg2, SAAsyncSession]


def stacks_snippet(marker: str) -> str:
    return snippet("guides/stacks.md", marker)


def deliver(db_url: str, rx: Receiver, expected: dict[uuid.UUID, dict[str, Any]]) -> None:
    """Deliver what is due, in-process; every expected event arrived once, signed, with its
    payload."""
    stats = deliver_due(db_url, schema=SCHEMA)
    received = rx.wait(len(expected), 5)
    assert stats["delivered"] == len(expected)
    got = {r.webhook_id: r for r in received}
    assert len(got) == len(received)
    assert set(got) == {str(i) for i in expected}
    for event_id, payload in expected.items():
        record = got[str(event_id)]
        assert record.signature_ok is True
        assert json.loads(record.body) == payload


@pytest.mark.parametrize("stack_type", FAMILIES, ids=[s.name for s in FAMILIES])
def test_committed_events_are_delivered(db_url: str, stack_type: type[Stack],
                                        outbox_endpoint: uuid.UUID,
                                        outbox_receiver: Receiver) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(ORDERS)
    with stack_type(db_url) as stack, captured_events(db_url) as events:
        stack.emit(Event("order.placed", {"order": 0}))
        stack.rollback()  # never delivered
        stack.write(1)
        one = stack.emit(Event("order.placed", {"order": 1}))
        many = stack.emit_many([Event("order.placed", {"order": 1, "line": i})
                                for i in range(2)])
        stack.commit()
    expected = {one: {"order": 1}, many[0]: {"order": 1, "line": 0},
                many[1]: {"order": 1, "line": 1}}
    assert {event.id: event.payload for event in events} == expected  # not the rolled back
    deliver(db_url, outbox_receiver, expected)


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_django_view_from_the_docs_is_delivered(db_url: str, driver: str,
                                                  outbox_endpoint: uuid.UUID,
                                                  outbox_receiver: Receiver) -> None:
    """The docs' Django view (the test project's view) on Django's test client."""
    manage(db_url, driver, "migrate", "--no-input")
    seen = json.loads(manage(db_url, driver, "emit_scenarios", "view"))["view"]
    assert seen == {"forged": 403, "status": 201, "body": {"order": 7}}
    assert rows(db_url, "SELECT number, total::text FROM shop_order") == [(7, "12.50")]
    (event_id,) = (i for (i,) in rows(db_url, "SELECT id FROM outbox.events"))
    deliver(db_url, outbox_receiver, {event_id: {"order": 7, "total": "12.50"}})


def test_fastapi_sqlalchemy_snippet_from_the_docs(db_url: str, outbox_endpoint: uuid.UUID,
                                                    outbox_receiver: Receiver) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (number int PRIMARY KEY)")
    code = stacks_snippet("emit-fastapi").replace(
        "postgresql+asyncpg://localhost/app", db_url.replace("://", "+asyncpg://", 1))
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    with TestClient(namespace["app"], raise_server_exceptions=False) as client:
        with captured_events(db_url) as placed:
            answer = client.post("/orders/42")
        with captured_events(db_url) as duplicate:
            failed = client.post("/orders/42")  # duplicate order: its event rolls back too
        assert client.portal is not None
        client.portal.call(namespace["engine"].dispose)
    assert (answer.status_code, answer.json()) == (201, {"order": 42})
    assert failed.status_code == 500
    assert (placed.types, duplicate) == (["order.placed"], [])
    assert rows(db_url, "SELECT number FROM orders") == [(42,)]
    (event_id,) = (i for (i,) in rows(db_url, "SELECT id FROM outbox.events"))
    deliver(db_url, outbox_receiver, {event_id: {"order": 42}})


def test_psycopg2_snippet_from_the_docs(db_url: str, outbox_receiver: Receiver,
                                          outbox_webhook_secret: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (number int PRIMARY KEY)")
    code = stacks_snippet("emit-psycopg2").replace('"dbname=app"', repr(db_url))
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    namespace["conn"].close()
    assert rows(db_url, "SELECT number FROM orders") == [(42,)]
    assert count(db_url, "events") == 1
    add_endpoint(db_url, outbox_receiver.url + "/hook", secret=outbox_webhook_secret)
    # the event was emitted before the endpoint existed: no delivery; emit once more
    assert count(db_url, "deliveries") == 0
    with psycopg.connect(db_url) as c:
        c.execute("DELETE FROM orders")
        c.commit()
    exec(code, namespace)
    namespace["conn"].close()
    event_id = rows(db_url, f"SELECT id FROM {SCHEMA}.events ORDER BY id DESC LIMIT 1")[0][0]
    deliver(db_url, outbox_receiver, {event_id: {"order": 42}})
