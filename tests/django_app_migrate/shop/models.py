"""An application model, migrated beside the outbox schema."""

from __future__ import annotations

from decimal import Decimal

from django.db import models


class Order(models.Model):
    reference: models.CharField[str, str] = models.CharField(max_length=32, unique=True)
    total: models.DecimalField[Decimal, Decimal] = models.DecimalField(max_digits=10,
                                                                         decimal_places=2)

    class Meta:
        app_label = "shop"
