"""Fixtures: a real PostgreSQL, a migrated template, and a fresh database per test.

The databases come from outbox's own pytest plugin (:mod:`outbox.testing.plugin`, loaded
through its entry point); the names below are the ones this suite has always used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outbox.settings import Settings
from outbox.testing.postgres import TempCluster
from tests.support import pg


@pytest.fixture(scope="session")
def outbox_schema() -> str:
    return pg.SCHEMA


@pytest.fixture(scope="session")
def server_url(outbox_server_url: str) -> str:
    return outbox_server_url


@pytest.fixture(scope="session")
def template_db(outbox_template_database: str) -> str:
    return outbox_template_database


@pytest.fixture
def db_url(outbox_database_url: str) -> str:
    """A fresh, migrated database for this test only (commits are fine)."""
    return outbox_database_url


@pytest.fixture
def blank_db_url(outbox_blank_database_url: str) -> str:
    """A fresh database with no outbox schema."""
    return outbox_blank_database_url


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
