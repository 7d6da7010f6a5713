"""The Order table (as makemigrations wrote it)."""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[migrations.CreateModel]] = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("reference", models.CharField(max_length=32, unique=True)),
                ("total", models.DecimalField(decimal_places=2, max_digits=10)),
            ],
        ),
    ]
