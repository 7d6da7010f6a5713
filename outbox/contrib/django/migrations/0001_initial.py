"""Create (or bring up to date, or recognise) the outbox schema from outbox's SQL files."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from outbox.contrib.django.apps import migrate_schema


def forwards(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    migrate_schema(schema_editor.connection)


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[tuple[tuple[str, str], ...]] = ()
    # Reversing keeps the schema: it may hold undelivered events (see apps.py).
    operations: ClassVar[tuple[migrations.RunPython, ...]] = (
        migrations.RunPython(forwards, migrations.RunPython.noop, elidable=False),)
