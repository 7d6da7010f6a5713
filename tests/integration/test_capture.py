"""Table capture (outbox capture / outbox.admin.capture): one event per changed row, in
the writer's transaction."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from outbox import OperationRefused
from outbox.admin import capture
from outbox.admin import endpoints as ep
from tests.support.cli import execute, invoke
from tests.support.pg import SCHEMA, count

TABLE = """CREATE TABLE public.orders (id int PRIMARY KEY, status text, total numeric,
                                        note text, shop text)"""


@pytest.fixture
def orders(db_url: str) -> str:
    execute(db_url, TABLE)
    with psycopg.connect(db_url, autocommit=True) as c:
        ep.add(c, "https://example.com/hook", schema=SCHEMA, all_tenants=True, ordered=True)
    return db_url


def _events(url: str) -> list[tuple[Any, ...]]:
    return execute(url, "SELECT type, payload::text, key, tenant FROM outbox.events ORDER BY id")


def _payloads(url: str) -> list[dict[str, Any]]:
    return [json.loads(p) for _, p, _, _ in _events(url)]


def test_insert_update_delete_with_columns_and_key(orders: str) -> None:
    out = invoke(orders, "capture", "add", "orders", "--type", "order.changed", "--key",
                 "id", "--tenant-column", "shop", "--columns", "id,status,total")
    assert out.exit_code == 0, out.output
    assert "capturing orders: delete,insert,update -> order.changed" in out.output
    execute(orders, "INSERT INTO orders VALUES (7, 'new', 9.5, 'n', 'acme')")
    execute(orders, "UPDATE orders SET status = 'paid' WHERE id = 7")
    execute(orders, "UPDATE orders SET note = 'not captured' WHERE id = 7")  # emits nothing
    execute(orders, "UPDATE orders SET status = 'paid', total = 9.50 WHERE id = 7")  # same values
    execute(orders, "DELETE FROM orders WHERE id = 7")
    rows = _events(orders)
    assert [(t, k, tn) for t, _, k, tn in rows] == [("order.changed", "7", "acme")] * 3
    new = {"id": 7, "status": "new", "total": 9.5}
    paid = {**new, "status": "paid"}
    assert _payloads(orders) == [
        {"op": "insert", "table": "public.orders", "new": new, "old": None},
        {"op": "update", "table": "public.orders", "new": paid, "old": new},
        {"op": "delete", "table": "public.orders", "new": None, "old": paid},
    ]
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):  # a captured column
        execute(orders, "ALTER TABLE orders DROP COLUMN status")
    execute(orders, "ALTER TABLE orders DROP COLUMN note")  # not captured
    # ordered endpoint, key 7: the three deliveries queue behind each other
    assert execute(orders, "SELECT key, state FROM outbox.deliveries ORDER BY id") == [
        ("7", "fresh")] * 3


def test_all_columns_and_chosen_operations(orders: str) -> None:
    with psycopg.connect(orders, autocommit=True) as c, c.cursor() as cur:
        capture.add(cur, "public.orders", type="order.created", schema=SCHEMA, on=["insert"])
    execute(orders, "INSERT INTO orders VALUES (1, 'new', 1, NULL, NULL)")
    execute(orders, "UPDATE orders SET status = 'paid'")
    execute(orders, "DELETE FROM orders")
    invoke(orders, "capture", "add", "orders", "--type", "order.changed", "--on", "update")
    execute(orders, "INSERT INTO orders VALUES (2, 'new', 1, NULL, NULL)")
    execute(orders, "UPDATE orders SET status = status, note = NULL")  # no value changes
    assert _payloads(orders) == [{"op": "insert", "table": "public.orders", "old": None,
                                  "new": {"id": 1, "status": "new", "total": 1, "note": None,
                                          "shop": None}}]
    assert [r[2:] for r in _events(orders)] == [(None, None)]


def test_rolled_back_writes_emit_nothing(orders: str) -> None:
    invoke(orders, "capture", "add", "orders", "--type", "order.changed")
    with psycopg.connect(orders) as c:
        c.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL, NULL)")
        c.execute("SAVEPOINT s")
        c.execute("INSERT INTO orders VALUES (2, 'new', 1, NULL, NULL)")
        c.execute("ROLLBACK TO SAVEPOINT s")
        c.commit()
        c.execute("INSERT INTO orders VALUES (3, 'new', 1, NULL, NULL)")
        c.rollback()
    assert [p["new"]["id"] for p in _payloads(orders)] == [1]


def test_a_refused_event_fails_the_writing_statement(orders: str) -> None:
    invoke(orders, "capture", "add", "orders", "--type", "order.changed", "--key", "note")
    with psycopg.connect(orders) as c:
        c.execute("INSERT INTO orders VALUES (1, 'kept', 1, NULL, NULL)")
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="key is 300 characters, over 255"):
            c.execute("INSERT INTO orders VALUES (2, 'new', 1, repeat('k', 300), NULL)")
        c.rollback()
        c.execute("ALTER FUNCTION outbox.emit(text, jsonb, text, text, text)"
                  " SET outbox.max_payload_bytes = '100'")
        c.commit()
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="over the 100-byte"):
            c.execute("INSERT INTO orders VALUES (3, repeat('x', 200), 1, NULL, NULL)")
        c.rollback()
    assert execute(orders, "SELECT count(*) FROM orders") == [(0,)]
    assert count(orders, "events") == 0


def test_list_and_remove(orders: str) -> None:
    execute(orders, "CREATE TABLE public.shops (id int)")
    invoke(orders, "capture", "add", "orders", "--type", "order.changed", "--columns", "id")
    invoke(orders, "capture", "add", "shops", "--type", "shop.created", "--on", "insert")
    listed = invoke(orders, "capture", "list").output.splitlines()
    assert listed == [
        "orders\ttype=order.changed\ton=delete,insert,update\tkey=-\ttenant=-\tcolumns=id",
        "shops\ttype=shop.created\ton=insert\tkey=-\ttenant=-\tcolumns=*"]
    # adding again replaces the capture
    invoke(orders, "capture", "add", "orders", "--type", "order.v2", "--on", "update")
    with psycopg.connect(orders, autocommit=True) as c, c.cursor() as cur:
        found = {x.table: x for x in capture.list_captures(cur, schema=SCHEMA)}
        assert (found["orders"].type, found["orders"].on) == ("order.v2", ("update",))
        capture.remove(cur, "orders", schema=SCHEMA)
        with pytest.raises(OperationRefused, match="table orders is not captured"):
            capture.remove(cur, "orders", schema=SCHEMA)
    assert invoke(orders, "capture", "remove", "shops").exit_code == 0
    assert invoke(orders, "capture", "list").output == "no table is captured\n"
    execute(orders, "INSERT INTO orders VALUES (1, 'new', 1, NULL, NULL)")
    assert count(orders, "events") == 0


@pytest.mark.parametrize(("args", "message"), [
    (["nope", "--type", "x"], "table 'nope' does not exist"),
    (["orders", "--type", "bad type"], "event type 'bad type' is malformed"),
    (["orders", "--type", "x", "--columns", "id,nope"], "table public.orders has no column nope"),
    (["orders", "--type", "x", "--key", "nokey"], "table public.orders has no column nokey"),
    (["orders", "--type", "x", "--tenant-column", "notenant"], "has no column notenant"),
    (["orders", "--type", "x", "--on", "insert,truncate"], "not truncate"),
    (["orders", "--type", "x", "--on", ""], "not none"),
    (["orders", "--type", "x", "--columns", ","], "give at least one"),
    (["orders_view", "--type", "x"], "public.orders_view is not a table"),
])
def test_bad_input_installs_nothing(orders: str, args: list[str], message: str) -> None:
    execute(orders, "CREATE VIEW orders_view AS SELECT * FROM orders")
    triggers = "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal"
    before = execute(orders, triggers)  # outbox's own (flow rows, the catalog's version)
    out = invoke(orders, "capture", "add", *args)
    assert out.exit_code == 1 and message in out.output, out.output
    assert execute(orders, triggers) == before


def test_the_statement_is_plain_sql_for_migration_tools(orders: str) -> None:
    statement = capture.add_statement("orders", type="order.changed", schema=SCHEMA,
                                      key="id", columns=["id", "status"])
    execute(orders, statement)  # as psql, Alembic's op.execute or any client runs it
    execute(orders, "INSERT INTO orders VALUES (5, 'new', 1, NULL, NULL)")
    assert _payloads(orders)[0]["new"] == {"id": 5, "status": "new"}
