"""Event types from pydantic models: the schema in the catalog is the model's own, so the
code that builds a payload and the schema receivers read cannot drift.

::

    class InvoicePaid(BaseModel):
        invoice_id: str
        amount_cents: int

    outbox.types.register(InvoicePaid, name="invoice.paid")      # or @outbox.types.event_type(...)
    outbox.types.publish(conn, schema="outbox")                   # at deploy: upsert them all
    outbox.emit(conn, outbox.types.event(InvoicePaid(invoice_id="in_1", amount_cents=5)))

:func:`register` only records the model in this process (it is safe at import time);
:func:`publish` writes every recorded type to the catalog in the caller's transaction (or
``register(..., conn=conn)`` writes one at once). The schema is the model's serialisation
schema (``model_json_schema(mode="serialization")``), the shape ``emit`` sends, since a
model payload is encoded with ``model_dump(mode="json")``. The catalog operations
themselves (list, update, deprecate, remove) are :mod:`outbox.admin.types`'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from pydantic import BaseModel

from outbox._emit.event import Event
from outbox.admin import types as admin_types
from outbox.admin.types import EventType
from outbox.errors import InvalidEventType
from outbox.settings import get_settings

__all__ = ["EventType", "Registered", "event", "event_type", "publish", "register",
           "registered", "schema_of"]

M = TypeVar("M", bound=type[BaseModel])


@dataclass(frozen=True, slots=True)
class Registered:
    """A model recorded by :func:`register`, not yet necessarily in the catalog."""

    name: str
    model: type[BaseModel]
    description: str
    example: Any


_BY_NAME: dict[str, Registered] = {}
_BY_MODEL: dict[type[BaseModel], str] = {}


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of what ``emit`` sends for an instance of ``model``."""
    return model.model_json_schema(mode="serialization")


def _example(model: type[BaseModel], example: Any) -> Any:
    if isinstance(example, BaseModel):
        return example.model_dump(mode="json")
    if example is None:
        examples = schema_of(model).get("examples")
        return examples[0] if isinstance(examples, list) and examples else None
    return model.model_validate(example).model_dump(mode="json")


def register(model: M, *, name: str, description: str | None = None, example: Any = None,
             conn: psycopg.Connection[Any] | None = None, schema: str | None = None) -> M:
    """Record ``model`` as the payload of event type ``name``; with ``conn``, also write it
    to the catalog now (as :func:`publish` does). ``description`` defaults to the model's
    docstring; ``example`` (an instance or a dict the model validates) to the schema's first
    ``examples`` entry. Returns ``model``. InvalidEventType if the name or model is already
    recorded under another name/model, or if the example does not match."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidEventType(f"register takes a pydantic model class, not {model!r}")
    admin_types.check_name(name)
    entry = Registered(name, model, description if description is not None else
                       " ".join((model.__doc__ or "").split()), _example(model, example))
    held = _BY_NAME.get(name)
    if held is not None and held.model is not model:
        raise InvalidEventType(
            f"event type {name!r} is already registered to {held.model.__qualname__}")
    if _BY_MODEL.get(model, name) != name:
        raise InvalidEventType(
            f"{model.__qualname__} is already registered as {_BY_MODEL[model]!r}")
    _BY_NAME[name] = entry
    _BY_MODEL[model] = name
    if conn is not None:
        _write(conn, entry, schema or get_settings().schema_name)
    return model


def event_type(name: str, *, description: str | None = None,
               example: Any = None) -> Callable[[M], M]:
    """Decorator form of :func:`register`: ``@event_type("invoice.paid")`` on the model."""
    def decorate(model: M) -> M:
        return register(model, name=name, description=description, example=example)
    return decorate


def registered() -> list[Registered]:
    """The models recorded in this process, by name."""
    return [_BY_NAME[n] for n in sorted(_BY_NAME)]


def _write(conn: psycopg.Connection[Any], entry: Registered, schema: str) -> bool:
    _, changed = admin_types.put(conn, entry.name, schema=schema,
                                 json_schema=schema_of(entry.model),
                                 description=entry.description, example=entry.example)
    return changed


def publish(conn: psycopg.Connection[Any], *, schema: str | None = None) -> list[str]:
    """Write every recorded model's type to the catalog (insert or replace description,
    schema and example; the deprecated flag is kept), in the caller's transaction. Returns
    the names whose catalog entry changed."""
    sch = schema or get_settings().schema_name
    return [e.name for e in registered() if _write(conn, e, sch)]


def event(payload: BaseModel, *, key: str | None = None, idempotency_key: str | None = None,
          tenant: str | None = None) -> Event:
    """An :class:`~outbox.Event` whose type is the one ``payload``'s model is registered as."""
    name = _BY_MODEL.get(type(payload))
    if name is None:
        raise InvalidEventType(
            f"{type(payload).__qualname__} is not registered: outbox.types.register(...) it")
    return Event(name, payload, key=key, idempotency_key=idempotency_key, tenant=tenant)
