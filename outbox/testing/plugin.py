"""The pytest plugin of :mod:`outbox.testing`: fixtures for an application's test suite.

pytest loads it by itself wherever outbox is installed (the ``pytest11`` entry point
``outbox``; ``-p no:outbox`` turns it off). Every fixture is named ``outbox_*``, so it
never shadows one of the application's; override any of them in a ``conftest.py``.

Fixtures
    ``outbox_server_url`` (session)
        A PostgreSQL server to make databases on: ``--outbox-database-url``, else
        ``$OUTBOX_TEST_DATABASE_URL``, else ``postgresql://postgres@127.0.0.1:5432/postgres``,
        else a throwaway cluster (``initdb`` + ``pg_ctl``) deleted at exit. A URL given
        that does not answer fails the tests; nothing is started in its place.
    ``outbox_schema`` (session)
        The outbox schema, ``"outbox"``.
    ``outbox_template_setup`` (session)
        A callable run once, on an autocommit connection to the template database: by
        default applies outbox's migrations in ``outbox_schema``. Override it to add the
        application's own tables (and call :func:`outbox.admin.migrations.migrate` yourself).
    ``outbox_template_database`` (session)
        The name of that template database, dropped at the end of the session.
    ``outbox_database_url`` (function)
        A fresh copy of the template (``CREATE DATABASE ... TEMPLATE``) for this test only,
        dropped afterwards (open connections included): commits are fine, nothing leaks
        into the next test.
    ``outbox_blank_database_url`` (function)
        A fresh empty database (no outbox schema), dropped afterwards.
    ``outbox_webhook_secret`` (function)
        A new ``whsec_...`` secret.
    ``outbox_receiver`` (function)
        A :class:`~outbox.testing.receiver.Receiver` on 127.0.0.1 (a free port) that
        verifies signatures with ``outbox_webhook_secret`` and records every request;
        stopped after the test.
    ``outbox_endpoint`` (function)
        An endpoint in ``outbox_database_url`` for every event type of every tenant (and
        tenant-less ones: ``all_tenants``), delivering to
        ``outbox_receiver`` (``<receiver url>/webhooks``) with ``outbox_webhook_secret``;
        its id.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from outbox.admin import endpoints
from outbox.admin.migrations import migrate
from outbox.signing import generate_secret
from outbox.testing import postgres
from outbox.testing.receiver import Receiver

__all__ = [
    "TemplateSetup",
    "outbox_blank_database_url",
    "outbox_database_url",
    "outbox_endpoint",
    "outbox_receiver",
    "outbox_schema",
    "outbox_server_url",
    "outbox_template_database",
    "outbox_template_setup",
    "outbox_webhook_secret",
    "pytest_addoption",
]

#: What ``outbox_template_setup`` returns: run once on the template database's connection.
TemplateSetup = Callable[[psycopg.Connection[Any]], None]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("outbox", "outbox.testing (throwaway databases, receiver)")
    group.addoption(
        "--outbox-database-url", metavar="URL", default=None,
        help="PostgreSQL server the outbox_* fixtures make their databases on (default:"
             " $OUTBOX_TEST_DATABASE_URL, else 127.0.0.1:5432, else a throwaway cluster)")


@pytest.fixture(scope="session")
def outbox_server_url(pytestconfig: pytest.Config) -> str:
    """The server the databases are made on (see the module)."""
    url = (pytestconfig.getoption("outbox_database_url")
           or os.environ.get("OUTBOX_TEST_DATABASE_URL") or None)
    return postgres.find_or_start(url)


@pytest.fixture(scope="session")
def outbox_schema() -> str:
    """The outbox schema of the test databases."""
    return "outbox"


@pytest.fixture(scope="session")
def outbox_template_setup(outbox_schema: str) -> TemplateSetup:
    """What the template database gets once: outbox's migrations in ``outbox_schema``."""

    def setup(conn: psycopg.Connection[Any]) -> None:
        migrate(conn, outbox_schema)

    return setup


@pytest.fixture(scope="session")
def outbox_template_database(outbox_server_url: str,
                             outbox_template_setup: TemplateSetup) -> Iterator[str]:
    """The migrated template database's name (dropped after the session)."""
    name = postgres.create_template(outbox_server_url, setup=outbox_template_setup)
    yield name
    postgres.drop_database(outbox_server_url, postgres.with_dbname(outbox_server_url, name))


@pytest.fixture
def outbox_database_url(outbox_server_url: str, outbox_template_database: str) -> Iterator[str]:
    """A fresh, migrated database for this test only (commits are fine)."""
    url = postgres.create_database(outbox_server_url, template=outbox_template_database)
    yield url
    postgres.drop_database(outbox_server_url, url)


@pytest.fixture
def outbox_blank_database_url(outbox_server_url: str) -> Iterator[str]:
    """A fresh database with no outbox schema."""
    url = postgres.create_database(outbox_server_url)
    yield url
    postgres.drop_database(outbox_server_url, url)


@pytest.fixture
def outbox_webhook_secret() -> str:
    """A new signing secret (``whsec_...``)."""
    return generate_secret()


@pytest.fixture
def outbox_receiver(outbox_webhook_secret: str) -> Iterator[Receiver]:
    """A recording receiver verifying ``outbox_webhook_secret``; stopped after the test."""
    with Receiver(secret=outbox_webhook_secret) as receiver:
        yield receiver


@pytest.fixture
def outbox_endpoint(outbox_database_url: str, outbox_schema: str, outbox_receiver: Receiver,
                    outbox_webhook_secret: str) -> uuid.UUID:
    """An endpoint (every event type, every tenant) delivering to ``outbox_receiver``;
    its id."""
    with psycopg.connect(outbox_database_url, autocommit=True) as conn:
        created = endpoints.add(conn, f"{outbox_receiver.url}/webhooks", schema=outbox_schema,
                                secret=outbox_webhook_secret, all_tenants=True)
    return created.endpoint.id
