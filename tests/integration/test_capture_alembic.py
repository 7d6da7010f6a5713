"""outbox.contrib.alembic.capture/uncapture: the capture's SQL through Alembic's op, online
(committed with the revision's transaction) and offline (printed)."""

from __future__ import annotations

import io
import json

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations

from outbox.contrib import alembic as outbox_alembic
from tests.support.cli import execute
from tests.support.pg import SCHEMA


def test_capture_in_a_revision_transaction(db_url: str) -> None:
    execute(db_url, "CREATE TABLE orders (id int PRIMARY KEY, status text, note text)")
    engine = sa.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        op = Operations(MigrationContext.configure(conn))
        outbox_alembic.capture("orders", type="order.changed", key="id",
                               columns=["id", "status"], schema=SCHEMA, op=op)
    execute(db_url, "INSERT INTO orders VALUES (1, 'new', 'n')")
    payload = execute(db_url, "SELECT payload::text FROM outbox.events")[0][0]
    assert json.loads(payload)["new"] == {"id": 1, "status": "new"}
    with engine.begin() as conn:
        op = Operations(MigrationContext.configure(conn))
        outbox_alembic.uncapture("orders", schema=SCHEMA, op=op)
    execute(db_url, "INSERT INTO orders VALUES (2, 'new', 'n')")
    assert execute(db_url, "SELECT count(*) FROM outbox.events") == [(1,)]
    engine.dispose()


def test_offline_prints_the_statement() -> None:
    out = io.StringIO()
    ctx = MigrationContext.configure(dialect_name="postgresql",
                                     opts={"as_sql": True, "output_buffer": out})
    outbox_alembic.capture("orders", type="order.changed", schema=SCHEMA, op=Operations(ctx))
    assert "SELECT \"outbox\".capture_add('orders', 'order.changed', NULL, NULL," in (
        out.getvalue())
