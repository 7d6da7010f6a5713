"""An application migration that uses the outbox tables, so it depends on outbox's."""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [
        ("shop", "0001_initial"), ("outbox", "0001_initial")]
    operations: ClassVar[list[migrations.RunSQL]] = [
        migrations.RunSQL(
            "CREATE VIEW shop_paid_events AS SELECT id, payload FROM outbox.events"
            " WHERE type = 'order.paid'",
            "DROP VIEW shop_paid_events"),
    ]
