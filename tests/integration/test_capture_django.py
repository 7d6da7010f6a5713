"""``manage.py outbox_capture`` in a real Django project (tests/django_app_migrate), on
Django's psycopg 3 and psycopg2 backends: ORM writes emit events in their transaction."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_django_migrate import manage
from tests.support.workers import rows

SHELL = """
from django.db import transaction
from tests.django_app_migrate.shop.models import Order
Order.objects.create(reference="r-1", total="5.00")
Order.objects.filter(reference="r-1").update(total="7.50")
try:
    with transaction.atomic():
        Order.objects.create(reference="r-2", total="1.00")
        raise RuntimeError("rolled back")
except RuntimeError:
    pass
Order.objects.filter(reference="r-1").delete()
"""


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_orm_writes_are_captured(blank_db_url: str, driver: str) -> None:
    manage(blank_db_url, "migrate", driver=driver)
    out = manage(blank_db_url, "outbox_capture", "add", "shop_order", "--type",
                 "order.changed", "--key", "reference", "--columns", "reference,total",
                 driver=driver).stdout
    assert "capturing shop_order: delete,insert,update -> order.changed" in out
    assert "shop_order\ttype=order.changed" in manage(
        blank_db_url, "outbox_capture", "list", driver=driver).stdout
    manage(blank_db_url, "shell", "-c", SHELL, driver=driver)
    events = rows(blank_db_url, "SELECT key, payload::text FROM outbox.events ORDER BY id")
    assert [k for k, _ in events] == ["r-1"] * 3
    assert [json.loads(p)["op"] for _, p in events] == ["insert", "update", "delete"]
    assert json.loads(events[1][1])["new"] == {"reference": "r-1", "total": 7.5}
    bad = manage(blank_db_url, "outbox_capture", "add", "shop_order", "--type", "x",
                 "--columns", "nope", driver=driver, check=False)
    assert bad.returncode == 1 and "has no column nope" in bad.stderr
    manage(blank_db_url, "outbox_capture", "remove", "shop_order", driver=driver)
    assert manage(blank_db_url, "outbox_capture", "list", driver=driver).stdout == ""
