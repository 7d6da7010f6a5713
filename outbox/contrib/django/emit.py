"""Emit from Django: the event commits with the ORM writes of the same ``transaction.atomic()``.

``emit(event, using="default")`` runs outbox's statement on Django's own connection
(``connections[using].cursor()``, the psycopg 3 or psycopg2 backend), inside the caller's
atomic block, so ``Order.objects.create(...)`` and the event commit or roll back together.

Guarantees (those of :func:`outbox.emit`, on Django's connection):

- Outside ``transaction.atomic()`` (Django's autocommit), or in an atomic block whose
  transaction already failed, :class:`~outbox.errors.NotInTransaction` before any SQL.
- Invalid events: :class:`~outbox.errors.InvalidEvent` before any SQL. A database error
  comes out as an :class:`~outbox.errors.OutboxError` (the atomic block rolls back as for
  any failed query).
- The same ``idempotency_key`` twice returns the first event's id and inserts nothing.

Prepared statements: on Django's default psycopg 3 cursor (``ClientCursor``) or psycopg2,
the single-event emits run as SQL ``PREPARE``d statements after ``PREPARE_THRESHOLD`` runs
(:mod:`outbox._emit.drivers.dbapi`); with ``OPTIONS={"server_side_binding": True}`` psycopg 3
prepares them itself and outbox sends them as they are.

Settings (schema, payload limit, wake-up, ``JSON_DEFAULT``, prepare threshold) are the
project's: :mod:`outbox.contrib.django.settings` (the Django settings, then the
environment), unless ``settings=`` is given. Django's connections are synchronous: in an
async view, call these through ``asgiref.sync.sync_to_async`` together with the writes
they belong to.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.db import utils as db_utils
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import TransactionManagementError

from outbox._emit.drivers import portable
from outbox._emit.drivers.base import FAILED_TRANSACTION, translate
from outbox._emit.drivers.dbapi import CursorRunner
from outbox._emit.event import Event
from outbox.contrib.django.settings import outbox_settings
from outbox.errors import NotInTransaction
from outbox.settings import Settings


@lru_cache(maxsize=1)
def _project_settings() -> Settings:
    """The project's outbox settings (Django settings, then the environment), read once;
    again after ``override_settings`` changes an ``OUTBOX`` setting."""
    return outbox_settings()


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("OUTBOX"):
        _project_settings.cache_clear()


setting_changed.connect(_forget, dispatch_uid="outbox.contrib.django.emit")


def _settings_schema(schema: str | None, settings: Settings | None) -> tuple[Settings, str]:
    s = settings or _project_settings()
    return s, schema or s.schema_name


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except TransactionManagementError as exc:
        raise NotInTransaction(FAILED_TRANSACTION) from exc
    except db_utils.Error as exc:
        connection_error = isinstance(exc, db_utils.OperationalError | db_utils.InterfaceError)
        raise translate(exc, connection_error=connection_error) from exc


def _check(conn: BaseDatabaseWrapper) -> None:
    if conn.needs_rollback:
        raise NotInTransaction(FAILED_TRANSACTION)
    if conn.get_autocommit():
        raise NotInTransaction(
            f"database {conn.alias!r} is in autocommit mode outside transaction.atomic(): "
            "emit inside `with transaction.atomic():` so the event commits with your writes"
        )


def _runner(using: str) -> CursorRunner:
    conn = connections[using]
    if conn.vendor != "postgresql":
        raise TypeError(
            f"outbox emits on PostgreSQL (Django's postgresql backend, psycopg 3 or psycopg2); "
            f"database {using!r} is {conn.vendor}"
        )
    # prepared only on Django's default ClientCursor: a server-side binding cursor
    # (OPTIONS={"server_side_binding": True}) prepares by itself
    return CursorRunner(conn.cursor, lambda: _check(conn), _translated, lambda: conn.connection,
                        lambda wrapper: wrapper.cursor)


def emit(
    event: Event,
    *,
    using: str = "default",
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: Callable[[Any], Any] | None = None,
) -> uuid.UUID:
    """Insert ``event`` and its deliveries in the current ``transaction.atomic()`` block of
    database ``using``; return the event id (the ``webhook-id`` receivers see)."""
    s, sch = _settings_schema(schema, settings)
    return portable.emit(_runner(using), event, s, sch, json_default)


def emit_many(
    events: Iterable[Event],
    *,
    using: str = "default",
    schema: str | None = None,
    settings: Settings | None = None,
    json_default: Callable[[Any], Any] | None = None,
) -> list[uuid.UUID]:
    """:func:`emit` for many events in one statement; ids in input order. All are
    validated before any SQL: one invalid event writes none of them."""
    s, sch = _settings_schema(schema, settings)
    return portable.emit_many(_runner(using), events, s, sch, json_default)
