"""Pydantic models registered as event types, for ``outbox types publish`` tests."""

from __future__ import annotations

from pydantic import BaseModel

import outbox.types


class Line(BaseModel):
    sku: str
    quantity: int


@outbox.types.event_type("shop.order.placed", example={"order_id": "o_1", "lines": [
    {"sku": "tea", "quantity": 2}]})
class OrderPlaced(BaseModel):
    """An order was placed."""

    order_id: str
    lines: list[Line]
