"""outbox.testing.postgres and the database fixtures: copies of a migrated template,
isolated from each other, dropped afterwards; a failing template setup leaves nothing."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from outbox.testing import postgres
from tests.support.pg import count


def _databases(server_url: str, prefix: str) -> set[str]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                            [prefix + "%"]).fetchall()
    return {row[0] for row in rows}


def test_copies_are_migrated_and_isolated(outbox_server_url: str,
                                          outbox_template_database: str,
                                          outbox_database_url: str) -> None:
    other = postgres.create_database(outbox_server_url, template=outbox_template_database)
    try:
        with psycopg.connect(outbox_database_url) as conn:
            conn.execute("INSERT INTO outbox.events (id, type, payload) VALUES"
                         " (gen_random_uuid(), 'x.y', '{}')")
            conn.commit()
        assert count(outbox_database_url, "events") == 1
        assert count(other, "events") == 0
        template = postgres.with_dbname(outbox_server_url, outbox_template_database)
        assert count(template, "events") == 0
    finally:
        postgres.drop_database(outbox_server_url, other)
    assert postgres.dbname(other) not in _databases(outbox_server_url, "outbox_t_")


def test_a_blank_database_has_no_outbox_schema(outbox_blank_database_url: str) -> None:
    with psycopg.connect(outbox_blank_database_url) as conn:
        row = conn.execute("SELECT to_regnamespace('outbox')").fetchone()
    assert row == (None,)


def test_a_database_is_dropped_with_connections_open(outbox_server_url: str) -> None:
    url = postgres.create_database(outbox_server_url)
    with psycopg.connect(url) as conn:
        postgres.drop_database(outbox_server_url, url)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    assert postgres.dbname(url) not in _databases(outbox_server_url, "outbox_t_")
    postgres.drop_database(outbox_server_url, url)  # gone already: no error


def test_a_failing_template_setup_leaves_no_database(outbox_server_url: str) -> None:
    prefix = f"outbox_tplfail_{uuid.uuid4().hex[:6]}"

    def setup(conn: psycopg.Connection[Any]) -> None:
        conn.execute("CREATE TABLE orders (id int)")
        conn.execute("SELECT no_such_function()")

    with pytest.raises(psycopg.errors.UndefinedFunction):
        postgres.create_template(outbox_server_url, setup=setup, prefix=prefix)
    assert _databases(outbox_server_url, prefix) == set()


def test_an_unreachable_url_is_refused_with_its_password_masked() -> None:
    with pytest.raises(RuntimeError, match="not reachable") as caught:
        postgres.find_or_start("postgresql://u:s3cret@127.0.0.1:1/postgres")
    assert "s3cret" not in str(caught.value)
