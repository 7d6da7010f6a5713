"""Fixtures: a real PostgreSQL, a migrated template, and a fresh database per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outbox.devdb import TempCluster
from outbox.settings import Settings
from tests.support import pg


@pytest.fixture(scope="session")
def server_url() -> str:
    return pg.server_url()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = pg.create_template(server_url)
    yield name
    pg.drop_database(server_url, pg.with_dbname(server_url, name))


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for this test only (commits are fine)."""
    url = pg.create_database(server_url, template=template_db)
    yield url
    pg.drop_database(server_url, url)


@pytest.fixture
def blank_db_url(server_url: str) -> Iterator[str]:
    """A fresh database with no outbox schema."""
    url = pg.create_database(server_url)
    yield url
    pg.drop_database(server_url, url)


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, schema_name=pg.SCHEMA)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A non-autocommit connection to the test's database."""
    with psycopg.connect(db_url) as c:
        yield c


@pytest.fixture
def aconn_url(db_url: str) -> str:
    return db_url


@pytest.fixture
def own_cluster() -> Iterator[TempCluster]:
    """A private PostgreSQL cluster (initdb + pg_ctl) that the test may stop and start."""
    cluster = TempCluster()
    try:
        yield cluster
    finally:
        cluster.destroy()
