"""``outbox types``: register, list, show, update, deprecate, remove, publish and export,
through the command line, against a real PostgreSQL; the OpenAPI export checked by
openapi-spec-validator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from outbox._emit import catalog
from tests.support.cli import execute, invoke, run_cli

SCHEMA_OBJ = {"type": "object", "properties": {
    "amount": {"type": "integer"}, "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}}},
    "required": ["amount"], "$defs": {"Line": {"type": "object",
                                               "properties": {"sku": {"type": "string"}}}}}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA_OBJ))
    (tmp_path / "example.json").write_text(json.dumps({"amount": 5, "lines": [{"sku": "a"}]}))
    (tmp_path / "bad_example.json").write_text(json.dumps({"amount": "5"}))
    (tmp_path / "not_json.json").write_text("{nope")
    (tmp_path / "bad_schema.json").write_text(json.dumps({"type": 12}))
    return tmp_path


def ok(db_url: str, *args: str) -> Any:
    done = invoke(db_url, *args)
    assert done.exit_code == 0, done.output
    return json.loads(done.output) if "--json" in args else done.output


def test_the_whole_life_of_a_type(db_url: str, files: Path) -> None:
    catalog.forget()
    added = ok(db_url, "types", "add", "invoice.paid", "--schema", str(files / "schema.json"),
               "--example", str(files / "example.json"), "--description", "Paid.", "--json")
    assert (added["name"], added["schema"], added["deprecated"]) == (
        "invoice.paid", SCHEMA_OBJ, False)
    ok(db_url, "types", "add", "invoice.paid.v2")
    assert [t["name"] for t in ok(db_url, "types", "list", "--json")] == [
        "invoice.paid", "invoice.paid.v2"]
    assert "invoice.paid.v2" in ok(db_url, "types", "list")
    assert ok(db_url, "types", "show", "invoice.paid", "--json")["description"] == "Paid."
    assert '"amount"' in ok(db_url, "types", "show", "invoice.paid")
    updated = ok(db_url, "types", "update", "invoice.paid", "--description", "Now paid.",
                 "--json")
    assert (updated["description"], updated["schema"]) == ("Now paid.", SCHEMA_OBJ)
    assert ok(db_url, "types", "deprecate", "invoice.paid", "--json")["deprecated"] is True
    assert "current" in ok(db_url, "types", "deprecate", "invoice.paid", "--undo")
    assert ok(db_url, "types", "update", "invoice.paid.v2", "--schema",
              str(files / "schema.json"), "--json")["schema"] == SCHEMA_OBJ
    assert ok(db_url, "types", "update", "invoice.paid.v2", "--no-schema",
              "--json")["schema"] is None
    assert ok(db_url, "types", "remove", "invoice.paid.v2", "--json") == {
        "removed": "invoice.paid.v2"}
    assert [t["name"] for t in ok(db_url, "types", "list", "--json")] == ["invoice.paid"]


@pytest.mark.parametrize(("args", "code", "message"), [
    (["add", "bad name"], 1, "error: event type 'bad name' is malformed"),
    (["add", "x", "--schema", "{dir}/bad_schema.json"], 1, "error: invalid JSON Schema at $.type"),
    (["add", "x", "--schema", "{dir}/schema.json", "--example", "{dir}/bad_example.json"], 1,
     "error: the example does not match the schema at $.amount"),
    (["add", "x", "--schema", "{dir}/not_json.json"], 2, "not_json.json is not JSON"),
    (["add", "x", "--schema", "{dir}/missing.json"], 2, "cannot read"),
    (["show", "nope"], 1, "error: no event type 'nope' in the catalog"),
    (["remove", "nope"], 1, "error: no event type 'nope' in the catalog"),
    (["update", "nope", "--description", "d"], 1, "error: no event type 'nope'"),
    (["update", "x", "--schema", "{dir}/schema.json", "--no-schema"], 2, "exclude each other"),
    (["export", "--format", "word"], 2, "'word' is not one of"),
    (["publish", "no.such.module"], 2, "cannot import no.such.module"),
])
def test_bad_input_is_a_clear_error_and_nothing_written(
        db_url: str, files: Path, args: list[str], code: int, message: str) -> None:
    done = run_cli(db_url, "types", *[a.format(dir=files) for a in args])
    assert (done.returncode, "Traceback" in done.stderr) == (code, False), done.stderr
    assert message in done.stderr
    assert execute(db_url, "SELECT count(*) FROM outbox.event_types") == [(0,)]


def test_publish_registers_a_modules_models(db_url: str) -> None:
    # (the process's registry may hold other tests' models too: it is per process)
    seen = ok(db_url, "types", "publish", "tests.support.catalog_models", "--json")
    assert "shop.order.placed" in seen["changed"]
    assert set(seen["changed"]) == set(seen["registered"])
    shown = ok(db_url, "types", "show", "shop.order.placed", "--json")
    assert shown["description"] == "An order was placed."
    assert shown["schema"]["$defs"]["Line"]["required"] == ["sku", "quantity"]
    assert ok(db_url, "types", "publish", "tests.support.catalog_models", "--json")[
        "changed"] == []


def export(db_url: str, fmt: str, tmp_path: Path) -> Any:
    out = tmp_path / f"{fmt}.json"
    ok(db_url, "types", "export", "--format", fmt, "-o", str(out), "--title", "Shop")
    return json.loads(out.read_text())


def test_exports(db_url: str, files: Path, tmp_path: Path) -> None:
    ok(db_url, "types", "add", "invoice.paid", "--schema", str(files / "schema.json"),
       "--example", str(files / "example.json"), "--description", "An invoice was paid.")
    ok(db_url, "types", "add", "invoice.voided")
    ok(db_url, "types", "deprecate", "invoice.voided")
    ok(db_url, "types", "publish", "tests.support.catalog_models")
    doc = export(db_url, "openapi", tmp_path)
    validate(doc)  # openapi-spec-validator: a valid OpenAPI 3.1 document
    assert doc["openapi"] == "3.1.0"
    assert {"invoice.paid", "invoice.voided", "shop.order.placed"} <= set(doc["webhooks"])
    paid = doc["webhooks"]["invoice.paid"]["post"]
    assert [p["$ref"].rsplit("/", 1)[1] for p in paid["parameters"]] == [
        "webhook-id", "webhook-timestamp", "webhook-signature"]
    body = paid["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/InvoicePaid"}
    assert body["example"] == {"amount": 5, "lines": [{"sku": "a"}]}
    schemas = doc["components"]["schemas"]
    assert schemas["InvoicePaid"]["properties"]["lines"]["items"] == {
        "$ref": "#/components/schemas/InvoicePaid_Line"}
    assert doc["webhooks"]["invoice.voided"]["post"]["deprecated"] is True

    asyncapi = export(db_url, "asyncapi", tmp_path)
    assert asyncapi["asyncapi"] == "3.0.0"
    assert asyncapi["components"]["messages"]["ShopOrderPlaced"]["payload"] == {
        "$ref": "#/components/schemas/ShopOrderPlaced"}
    assert asyncapi["operations"]["sendWebhook"]["action"] == "send"

    bundle = export(db_url, "jsonschema", tmp_path)
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(bundle)
    order = {"$ref": "#/$defs/ShopOrderPlaced", **{k: v for k, v in bundle.items()
                                                   if k == "$defs"}}
    jsonschema.validate({"order_id": "o", "lines": [{"sku": "t", "quantity": 1}]}, order)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"order_id": "o", "lines": [{"sku": "t"}]}, order)
    assert bundle["x-event-types"]["invoice.voided"]["deprecated"] is True


def test_help_has_examples() -> None:
    from click.testing import CliRunner

    from outbox.cli import cli, load_commands

    load_commands()
    assert "Examples" in CliRunner().invoke(cli, ["types", "--help"]).output


def test_tenants_offered_a_type(db_url: str) -> None:
    assert ok(db_url, "types", "add", "a.b", "--offer-to", "acme", "--offer-to", "globex",
              "--json")["tenants"] == ["acme", "globex"]
    assert ok(db_url, "types", "update", "a.b", "--internal", "--json")["tenants"] == []
    assert "none (internal)" in ok(db_url, "types", "show", "a.b")
    assert ok(db_url, "types", "update", "a.b", "--offer-to-all", "--json")["tenants"] is None
    done = run_cli(db_url, "types", "add", "c.d", "--offer-to", "acme", "--internal")
    assert done.returncode == 2 and "exclude each other" in done.stderr
