"""The Django app ``outbox.contrib.django`` (label ``outbox``): ``manage.py migrate`` creates
and upgrades the outbox schema.

Add ``"outbox.contrib.django"`` to ``INSTALLED_APPS``. Then:

- ``manage.py migrate`` applies the Django migration ``outbox.0001_initial``, which runs
  the same SQL files as ``outbox migrate`` through
  :func:`outbox.admin.migrations.apply_in_transaction`
  on Django's connection (psycopg 3 or psycopg2 backend): the same checks, the same
  advisory lock (so it may run beside ``outbox migrate`` or another ``manage.py migrate``),
  and it commits together with Django's record of the migration. A schema already created
  by ``outbox migrate`` is recognised: nothing is re-applied.
- After upgrading the outbox package, run ``manage.py migrate`` as after any upgrade: on
  every database where ``outbox.0001_initial`` is applied, a ``post_migrate`` handler
  applies the SQL files the new version ships, in one transaction. No new Django migration
  file is needed per outbox release, and ``showmigrations`` keeps listing ``0001_initial``;
  ``outbox migrate`` (or ``--print`` for a DBA) stays equivalent.
- The schema is ``OUTBOX_SCHEMA`` (see :mod:`outbox.contrib.django.settings`). Database
  routers are obeyed (``allow_migrate(db, "outbox")``). A non-PostgreSQL database gets a
  :class:`~outbox.errors.ConfigurationError`.
- ``manage.py migrate outbox zero`` only forgets the Django record: the schema, which may
  hold undelivered events, stays (drop it yourself: ``DROP SCHEMA outbox CASCADE``); the
  next ``migrate`` recognises it.
- An application migration that uses the outbox tables (a trigger, a view) declares
  ``dependencies = [("outbox", "0001_initial")]``.
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db import connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.recorder import MigrationRecorder
from django.db.models.signals import post_migrate

from outbox.admin.migrations import Migration, apply_in_transaction
from outbox.contrib.django.settings import outbox_settings
from outbox.errors import ConfigurationError

__all__ = ["OutboxConfig", "migrate_schema"]

LABEL = "outbox"
INITIAL = "0001_initial"


def migrate_schema(connection: BaseDatabaseWrapper) -> list[Migration]:
    """Apply the pending outbox SQL migrations on Django's ``connection`` inside its current
    transaction (the caller's ``atomic`` block or migration); return those applied."""
    if connection.vendor != "postgresql":
        raise ConfigurationError(
            f"database {connection.alias!r} is {connection.vendor}: outbox needs PostgreSQL")
    schema = outbox_settings().schema_name
    with connection.cursor() as cursor:
        return apply_in_transaction(cursor, schema)


def _upgrade_after_migrate(sender: AppConfig, *, using: str, verbosity: int = 1,
                           **kwargs: Any) -> None:
    """post_migrate: bring an outbox schema Django created up to the installed version."""
    if "plan" not in kwargs or not router.allow_migrate(using, LABEL):
        return  # flush (tests) also sends post_migrate: only `migrate` upgrades
    connection = connections[using]
    if (LABEL, INITIAL) not in MigrationRecorder(connection).applied_migrations():
        return  # not migrated on this database (or `migrate outbox zero`)
    with transaction.atomic(using=using):
        applied = migrate_schema(connection)
    stdout = kwargs.get("stdout")
    if verbosity >= 1 and stdout is not None:
        for m in applied:
            stdout.write(f"  Applied outbox SQL migration {m.version:04d}_{m.name}\n")


class OutboxConfig(AppConfig):
    """``outbox.contrib.django``: the outbox schema under ``manage.py migrate``."""

    name = "outbox.contrib.django"
    label = LABEL
    verbose_name = "outbox"
    default = True

    def ready(self) -> None:
        post_migrate.connect(_upgrade_after_migrate, sender=self,
                             dispatch_uid="outbox.contrib.django.upgrade")
