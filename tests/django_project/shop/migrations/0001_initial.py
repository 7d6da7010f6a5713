"""The shop's one table (``manage.py makemigrations shop``, then formatted)."""

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("number", models.IntegerField(unique=True)),
                ("total", models.DecimalField(decimal_places=2, max_digits=10)),
            ],
        ),
    ]
