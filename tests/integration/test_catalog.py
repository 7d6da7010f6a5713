"""The event catalog's library: outbox.admin.types (add, list, get, update, deprecate,
remove), outbox.types (pydantic models), and emit's modes and cache, on a real PostgreSQL."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, Field

import outbox
import outbox.types
from outbox import Event, InvalidEvent, Settings
from outbox._emit import catalog
from outbox.admin import types
from outbox.errors import EventTypeNotFound, InvalidEventType
from tests.support.pg import SCHEMA, count

SCHEMA_OBJ = {"type": "object", "properties": {"amount": {"type": "integer"}},
              "required": ["amount"], "additionalProperties": False}


@pytest.fixture
def auto(db_url: str) -> Any:
    catalog.forget()
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def version(c: psycopg.Connection[Any]) -> int:
    row = c.execute("SELECT version FROM outbox.event_catalog").fetchone()
    assert row is not None
    return int(row[0])


def test_add_list_get_update_deprecate_remove(auto: psycopg.Connection[Any]) -> None:
    v0 = version(auto)
    added = types.add(auto, "invoice.paid", schema=SCHEMA, json_schema=SCHEMA_OBJ,
                      description="An invoice was paid", example={"amount": 5})
    assert (added.name, added.example, added.deprecated) == ("invoice.paid", {"amount": 5}, False)
    types.add(auto, "invoice.paid.v2", schema=SCHEMA)  # no schema: registered, unchecked
    assert [t.name for t in types.list_all(auto, schema=SCHEMA)] == [
        "invoice.paid", "invoice.paid.v2"]
    assert types.get(auto, "invoice.paid", schema=SCHEMA).json_schema == SCHEMA_OBJ
    updated = types.update(auto, "invoice.paid", schema=SCHEMA, description="Paid")
    assert (updated.description, updated.json_schema) == ("Paid", SCHEMA_OBJ)
    assert types.deprecate(auto, "invoice.paid", schema=SCHEMA).deprecated
    assert not types.deprecate(auto, "invoice.paid", schema=SCHEMA, deprecated=False).deprecated
    types.remove(auto, "invoice.paid.v2", schema=SCHEMA)
    assert [t.name for t in types.list_all(auto, schema=SCHEMA)] == ["invoice.paid"]
    assert version(auto) == v0 + 6  # every change bumped the catalog version


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "bad name"}, "malformed"),
    ({"name": ""}, "non-empty"),
    ({"json_schema": ["not", "an", "object"]}, "must be a JSON object"),
    ({"json_schema": {"type": "bogus"}}, r"invalid JSON Schema at \$\.type"),
    ({"json_schema": {"$schema": "http://json-schema.org/draft-07/schema#"}}, "draft 2020-12"),
    ({"json_schema": SCHEMA_OBJ, "example": {"amount": "5"}},
     r"example does not match the schema at \$\.amount"),
    ({"json_schema": SCHEMA_OBJ, "example": {"amount": 5, "extra": 1}},
     r"example does not match the schema at \$:"),
    ({"description": "x" * 2001}, "over 2000"),
])
def test_bad_input_is_refused_and_nothing_written(
        auto: psycopg.Connection[Any], kwargs: dict[str, Any], message: str) -> None:
    v0 = version(auto)
    args = {"name": "invoice.paid", **kwargs}
    with pytest.raises(InvalidEventType, match=message):
        types.add(auto, args.pop("name"), schema=SCHEMA, **args)
    assert types.list_all(auto, schema=SCHEMA) == [] and version(auto) == v0


def test_duplicates_and_unknown_names(auto: psycopg.Connection[Any]) -> None:
    types.add(auto, "a.b", schema=SCHEMA)
    with pytest.raises(InvalidEventType, match=r"already registered.*a\.b\.v2"):
        types.add(auto, "a.b", schema=SCHEMA)
    for op in (types.get, types.remove, types.deprecate):
        with pytest.raises(EventTypeNotFound, match="no event type 'nope'"):
            op(auto, "nope", schema=SCHEMA)
    with pytest.raises(InvalidEventType, match="example does not match"):
        types.update(auto, "a.b", schema=SCHEMA, json_schema=SCHEMA_OBJ, example={"x": 1})
    assert types.get(auto, "a.b", schema=SCHEMA).json_schema is None


class InvoicePaid(BaseModel):
    """An invoice was paid in full."""

    invoice_id: str
    amount_cents: int = Field(ge=0)


def test_pydantic_model_registers_its_schema_and_emits(
        auto: psycopg.Connection[Any], db_url: str) -> None:
    outbox.types.register(InvoicePaid, name="test.invoice.paid",
                          example=InvoicePaid(invoice_id="in_1", amount_cents=5))
    assert "test.invoice.paid" in outbox.types.publish(auto, schema=SCHEMA)
    assert outbox.types.publish(auto, schema=SCHEMA) == []  # unchanged: nothing written
    stored = types.get(auto, "test.invoice.paid", schema=SCHEMA)
    assert stored.json_schema == InvoicePaid.model_json_schema(mode="serialization")
    assert stored.description == "An invoice was paid in full."
    assert stored.example == {"invoice_id": "in_1", "amount_cents": 5}
    s = Settings(database_url=db_url, schema_name=SCHEMA)
    with psycopg.connect(db_url) as c:
        outbox.emit(c, outbox.types.event(InvoicePaid(invoice_id="in_2", amount_cents=7)),
                    settings=s)
        with pytest.raises(InvalidEvent, match=r"at \$\.amount_cents: -1 is less than"):
            outbox.emit(c, Event("test.invoice.paid", {"invoice_id": "x", "amount_cents": -1}),
                        settings=s)
        c.commit()
    assert count(db_url, "events") == 1
    class Other(BaseModel):
        x: int

    with pytest.raises(InvalidEventType, match="already registered to InvoicePaid"):
        outbox.types.register(Other, name="test.invoice.paid")


def test_decorator_form() -> None:
    @outbox.types.event_type("test.shipped")
    class Shipped(BaseModel):
        parcel: str

    assert Shipped.__name__ == "Shipped"
    assert outbox.types.event(Shipped(parcel="p")).type == "test.shipped"
    class Unknown(BaseModel):
        x: int = 0

    with pytest.raises(InvalidEventType, match="not registered"):
        outbox.types.event(Unknown())


def emit_one(db_url: str, event: Event, **settings: Any) -> None:
    s = Settings(database_url=db_url, schema_name=SCHEMA, **settings)
    with psycopg.connect(db_url) as c:
        outbox.emit(c, event, settings=s)
        c.commit()


def test_modes_warn_off_and_required_registration(
        auto: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    types.add(auto, "invoice.paid", schema=SCHEMA, json_schema=SCHEMA_OBJ)
    bad = Event("invoice.paid", {"amount": "no"})
    with pytest.raises(InvalidEvent):
        emit_one(db_url, bad)
    with caplog.at_level(logging.WARNING, "outbox.catalog"):
        emit_one(db_url, bad, validate_payloads="warn")
    assert "OUTBOX_VALIDATE=warn" in caplog.text
    emit_one(db_url, bad, validate_payloads="off")
    emit_one(db_url, Event("unregistered", {}))
    with pytest.raises(InvalidEvent, match="not registered in the catalog"):
        emit_one(db_url, Event("unregistered", {}), require_registered_types=True)
    emit_one(db_url, Event("invoice.paid", {"amount": 1}), require_registered_types=True)
    assert count(db_url, "events") == 4


def test_settings_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_VALIDATE", "warn")
    monkeypatch.setenv("OUTBOX_REQUIRE_REGISTERED_TYPES", "true")
    s = Settings()
    assert (s.validate_payloads, s.require_registered_types) == ("warn", True)
    monkeypatch.setenv("OUTBOX_VALIDATE", "sometimes")
    with pytest.raises(ValueError, match="strict"):
        Settings()


def test_deprecated_type_still_emits_with_a_warning(
        auto: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    types.add(auto, "old.thing", schema=SCHEMA)
    types.deprecate(auto, "old.thing", schema=SCHEMA)
    with caplog.at_level(logging.WARNING, "outbox.catalog"):
        emit_one(db_url, Event("old.thing", {}))
    assert "deprecated event type 'old.thing'" in caplog.text


def test_a_change_made_elsewhere_is_seen_after_the_refresh_interval(
        auto: psycopg.Connection[Any], db_url: str) -> None:
    """The process holds the catalog; a change made by another process (here: plain SQL,
    no forget()) is not seen while the copy is fresh, and is seen once it is stale."""
    types.add(auto, "invoice.paid", schema=SCHEMA, json_schema=SCHEMA_OBJ)
    emit_one(db_url, Event("invoice.paid", {"amount": 1}), catalog_refresh_seconds=3600)
    auto.execute("UPDATE outbox.event_types SET json_schema = '{\"type\": \"object\", "
                 "\"required\": [\"currency\"]}'")
    emit_one(db_url, Event("invoice.paid", {"amount": 1}), catalog_refresh_seconds=3600)
    with pytest.raises(InvalidEvent, match="currency"):
        emit_one(db_url, Event("invoice.paid", {"amount": 1}), catalog_refresh_seconds=0)


def test_fresh_copy_adds_no_query(auto: psycopg.Connection[Any], db_url: str) -> None:
    """The common emit runs no catalog query: once the process holds a fresh copy, emits
    succeed with the catalog table gone (a read would fail); a stale copy reads it."""
    types.add(auto, "invoice.paid", schema=SCHEMA, json_schema=SCHEMA_OBJ)
    s = Settings(database_url=db_url, schema_name=SCHEMA, catalog_refresh_seconds=3600)
    with psycopg.connect(db_url) as c:
        outbox.emit(c, Event("invoice.paid", {"amount": 1}), settings=s)
        c.commit()
        auto.execute("ALTER TABLE outbox.event_catalog RENAME TO event_catalog_away")
        for i in range(20):
            outbox.emit(c, Event("invoice.paid", {"amount": i}), settings=s)
        with pytest.raises(InvalidEvent):  # still checked, from the copy
            outbox.emit(c, Event("invoice.paid", {"amount": "x"}), settings=s)
        c.commit()
        stale = s.model_copy(update={"catalog_refresh_seconds": 0})
        with pytest.raises(outbox.SchemaMissing, match="outbox migrate"):
            outbox.emit(c, Event("invoice.paid", {"amount": 1}), settings=stale)
    assert count(db_url, "events") == 21


def test_the_check_sees_the_json_emit_sends(auto: psycopg.Connection[Any], db_url: str) -> None:
    """Payloads are checked as the JSON they are sent as: a Decimal is a string there, an
    int dict key a string, a tuple an array, a pydantic model its model_dump(mode="json")."""
    import decimal

    strict = {"type": "object", "additionalProperties": False, "properties": {
        "price": {"type": "string"}, "tags": {"type": "array"},
        "by_id": {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"}}}}
    types.add(auto, "priced", schema=SCHEMA, json_schema=strict)
    emit_one(db_url, Event("priced", {"price": decimal.Decimal("9.99"), "tags": ("a", "b"),
                                      "by_id": {1: "x"}}))
    with pytest.raises(InvalidEvent, match=r"at \$\.price: 9\.99 is not of type"):
        emit_one(db_url, Event("priced", {"price": 9.99}))
    types.add(auto, "model", schema=SCHEMA, json_schema=InvoicePaid.model_json_schema())
    emit_one(db_url, Event("model", InvoicePaid(invoice_id="i", amount_cents=1)))
    assert count(db_url, "events") == 2


def test_emitting_without_schemas_imports_no_validator(db_url: str) -> None:
    """An app whose catalog has no schema needs nothing beyond today's install: the
    validator (jsonschema-rs, the catalog extra) is imported only to check a schema."""
    script = (
        "import sys, psycopg, outbox\n"
        "with psycopg.connect(sys.argv[1]) as c:\n"
        "    outbox.emit(c, outbox.Event('free.type', {'a': 1}))\n"
        "    c.commit()\n"
        "assert 'jsonschema_rs' not in sys.modules, 'the validator was imported'\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script, db_url], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OUTBOX_SCHEMA": SCHEMA})
    assert done.stdout.strip() == "ok", done.stderr
    assert count(db_url, "events") == 1
