"""The Python snippets of the docs pages that no other test runs, executed as written.

(The quickstart, the stack, inbox and Alembic snippets run in their own tests:
tests/acceptance/test_readme.py, test_emit_stacks.py, test_docs_inbox.py and
tests/integration/test_alembic.py.)
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import psycopg
import pytest

import outbox
from tests.support.docs import snippet
from tests.support.inbox import SECRET, signed
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, rows

INVOICES = "CREATE TABLE invoices (id int, status text)"


def events(db_url: str) -> list[tuple[Any, ...]]:
    return rows(db_url, f"SELECT type, payload::text, key, tenant FROM {SCHEMA}.events")


def test_emit_intro(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(INVOICES)
        c.execute("INSERT INTO invoices VALUES (42, 'open')")
    exec(snippet("guides/emitting.md", "emit-intro").replace('"dbname=app"', repr(db_url)), {})
    assert events(db_url) == [("invoice.paid", '{"invoice":42}', "invoice-42", None)]
    assert rows(db_url, "SELECT status FROM invoices") == [("paid",)]


@pytest.mark.parametrize(("page", "name", "tenant"), [("index.md", "index-emit", None),
                                                     ("guides/tenants.md", "tenant-emit", "acme")])
def test_emit_fragment(db_url: str, page: str, name: str, tenant: str | None) -> None:
    """A fragment run where the page's reader has ``conn`` open; a rollback writes nothing."""
    add_endpoint(db_url, "http://127.0.0.1:9/hook", tenant=tenant)
    code = snippet(page, name)
    with psycopg.connect(db_url) as conn:
        conn.execute(INVOICES)
        conn.commit()
        with pytest.raises(RuntimeError), conn.transaction():
            exec(code, {"conn": conn, "outbox": outbox})
            raise RuntimeError("roll back")
        assert events(db_url) == []
        with conn.transaction():
            exec(code, {"conn": conn, "outbox": outbox})
    ((event_type, payload, _, got_tenant),) = events(db_url)
    assert (event_type, json.loads(payload), got_tenant) == ("invoice.paid", {"invoice": 42},
                                                             tenant)
    assert rows(db_url, f"SELECT count(*) FROM {SCHEMA}.deliveries")[0][0] == 1


class Money:
    def __init__(self, amount: Decimal, currency: str) -> None:
        self.amount, self.currency = amount, currency


def test_json_default(conn: psycopg.Connection[Any], db_url: str) -> None:
    namespace: dict[str, Any] = {"Money": Money}
    exec(snippet("guides/emitting.md", "json-default"), namespace)
    hook = namespace["json_default"]
    with conn.transaction():
        outbox.emit(conn, outbox.Event("order.paid", {"total": Money(Decimal("2.50"), "EUR")}),
                    json_default=hook)
    assert json.loads(events(db_url)[0][1]) == {"total": {"amount": "2.50", "currency": "EUR"}}
    with pytest.raises(outbox.InvalidEvent), conn.transaction():
        outbox.emit(conn, outbox.Event("order.paid", {"total": object()}), json_default=hook)
    assert len(events(db_url)) == 1


def test_verify_handler() -> None:
    namespace: dict[str, Any] = {}
    exec(snippet("guides/inbox.md", "verify-handler").replace('"whsec_..."', repr(SECRET)),
         namespace)
    handle = namespace["handle"]
    body, headers = signed({"invoice": 42})
    assert handle(body, headers) == 200
    assert handle(body.replace(b"42", b"43"), headers) == 400
    assert handle(*signed({"invoice": 42}, secret=outbox.generate_secret())) == 400
