from __future__ import annotations

from decimal import Decimal

from django.db import models


class Order(models.Model):
    """The business write an event belongs to."""

    number: models.IntegerField[int, int] = models.IntegerField(unique=True)
    total: models.DecimalField[Decimal, Decimal] = models.DecimalField(max_digits=10,
                                                                       decimal_places=2)
