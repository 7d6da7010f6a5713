"""``manage.py outbox_capture add|list|remove``: table capture (outbox.admin.capture) on
Django's own database connection, as ``outbox capture`` does on its own.

    manage.py outbox_capture add shop_order --type order.changed --key reference \\
        --columns reference,total
    manage.py outbox_capture list
    manage.py outbox_capture remove shop_order

``add`` and ``remove`` run in one transaction (``--database``: another alias). To ship a
capture with the application, call :func:`outbox.admin.capture.add_statement`'s SQL from a
migration instead (``migrations.RunSQL``), with ``dependencies = [("outbox",
"0001_initial")]``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections, transaction

from outbox.admin import capture
from outbox.contrib.django.settings import outbox_settings
from outbox.errors import OutboxError


def _csv(value: str | None) -> list[str] | None:
    return None if value is None else [p.strip() for p in value.split(",") if p.strip()]


class Command(BaseCommand):
    help = "Capture table changes as outbox events: add, list or remove a table's capture."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default="default")
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="install (or replace) the capture of TABLE")
        add.add_argument("table")
        add.add_argument("--type", required=True, dest="event_type")
        add.add_argument("--key", default=None, metavar="COLUMN")
        add.add_argument("--tenant-column", dest="tenant", default=None, metavar="COLUMN")
        add.add_argument("--on", default="insert,update,delete", metavar="OPS")
        add.add_argument("--columns", default=None, metavar="A,B,C")
        sub.add_parser("list", help="the captured tables")
        remove = sub.add_parser("remove", help="drop the capture of TABLE")
        remove.add_argument("table")

    def handle(self, *args: Any, **options: Any) -> None:
        schema = outbox_settings().schema_name
        alias = options["database"]
        try:
            with transaction.atomic(using=alias), connections[alias].cursor() as cur:
                self._run(cur, schema, options)
        except (OutboxError, DatabaseError) as exc:
            raise CommandError(str(exc).strip()) from exc

    def _run(self, cur: Any, schema: str, options: dict[str, Any]) -> None:
        action = options["action"]
        if action == "add":
            done = capture.add(cur, options["table"], type=options["event_type"], schema=schema,
                               key=options["key"], tenant=options["tenant"],
                               on=_csv(options["on"]) or [], columns=_csv(options["columns"]))
            self.stdout.write(f"capturing {done.table}: {','.join(done.on)} -> {done.type}")
        elif action == "remove":
            capture.remove(cur, options["table"], schema=schema)
            self.stdout.write(f"no longer capturing {options['table']}")
        else:
            for c in capture.list_captures(cur, schema=schema):
                self.stdout.write(f"{c.table}\ttype={c.type}\ton={','.join(c.on)}")
