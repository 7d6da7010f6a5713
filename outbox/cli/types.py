"""``outbox types``: the event catalog (register, list, show, update, deprecate, remove,
publish pydantic models, export OpenAPI / AsyncAPI / JSON Schema)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import click

from outbox.admin import type_export
from outbox.admin import types as catalog
from outbox.cli.output import cut, echo_json, print_table, when
from outbox.cli.root import Context, cli, pass_ctx

_KEEP: Any = object()
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
tenant_option = click.option(
    "--offer-to", "tenants", multiple=True, metavar="TENANT",
    help="Offer the type in the portal to this tenant only (repeatable; default: every tenant).")
internal_option = click.option("--internal", is_flag=True,
                               help="Offer the type to no tenant in the portal.")


def audience(tenants: tuple[str, ...], internal: bool) -> list[str] | None:
    if internal and tenants:
        raise click.UsageError("--internal and --offer-to exclude each other")
    return [] if internal else (list(tenants) or None)


def read_json(path: str | None, option: str) -> Any:
    """The JSON document in file ``path`` ('-': stdin); a usage error naming the option."""
    if path is None:
        return _KEEP
    try:
        with click.open_file(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}",
                                 param_hint=option) from None
    except ValueError as exc:
        raise click.BadParameter(f"{path} is not JSON: {exc}", param_hint=option) from None


def show(entry: catalog.EventType, as_json: bool) -> None:
    if as_json:
        echo_json(entry.as_json())
        return
    click.echo(f"name:        {entry.name}")
    click.echo(f"description: {entry.description or '-'}")
    click.echo(f"deprecated:  {'yes' if entry.deprecated else 'no'}")
    click.echo("tenants:     " + ("every tenant" if entry.tenants is None else
                                 ", ".join(entry.tenants) or "none (internal)"))
    click.echo(f"updated:     {when(entry.updated_at)}")
    click.echo("schema:      " + ("-" if entry.json_schema is None else
                                 json.dumps(entry.json_schema, indent=2)))
    click.echo("example:     " + ("-" if entry.example is None else
                                 json.dumps(entry.example, indent=2)))


@cli.group()
def types() -> None:
    """The event catalog: event types, their JSON Schemas and examples.

    Emit checks every payload of a type with a schema against it (OUTBOX_VALIDATE).
    A breaking change is a new name (invoice.paid.v2), not an edit.

    \b
    Examples:
      outbox types add invoice.paid --schema invoice_paid.json --example paid.json
      outbox types list --json
      outbox types deprecate invoice.paid
      outbox types publish myapp.events        # pydantic models registered in a module
      outbox types export --format openapi -o webhooks.json
    """


@types.command("add")
@click.argument("name")
@click.option("--schema", "schema_file", metavar="FILE",
              help="JSON Schema (draft 2020-12) payloads must match ('-': stdin).")
@click.option("--description", default=None, help="What the event means, for receivers.")
@click.option("--example", "example_file", metavar="FILE", help="An example payload (JSON).")
@tenant_option
@internal_option
@json_option
@pass_ctx
def add(ctx: Context, name: str, schema_file: str | None, description: str | None,
        example_file: str | None, tenants: tuple[str, ...], internal: bool,
        as_json: bool) -> None:
    """Register event type NAME (refused if it exists: use update)."""
    schema, example = read_json(schema_file, "--schema"), read_json(example_file, "--example")
    with ctx.connect() as conn:
        entry = catalog.add(conn, name, schema=ctx.schema,
                            json_schema=None if schema is _KEEP else schema,
                            description=description,
                            example=None if example is _KEEP else example,
                            tenants=audience(tenants, internal))
    show(entry, as_json) if as_json else click.echo(f"registered {entry.name}")


@types.command("list")
@json_option
@pass_ctx
def list_types(ctx: Context, as_json: bool) -> None:
    """List the registered event types."""
    with ctx.connect() as conn:
        found = catalog.list_all(conn, schema=ctx.schema)
    if as_json:
        echo_json([t.as_json() for t in found])
        return
    print_table(["NAME", "SCHEMA", "DEPRECATED", "DESCRIPTION"], [
        [t.name, "yes" if t.json_schema is not None else "-", "yes" if t.deprecated else "-",
         cut(t.description)] for t in found])


@types.command("show")
@click.argument("name")
@json_option
@pass_ctx
def show_type(ctx: Context, name: str, as_json: bool) -> None:
    """Show NAME's description, schema and example."""
    with ctx.connect() as conn:
        show(catalog.get(conn, name, schema=ctx.schema), as_json)


@types.command("update")
@click.argument("name")
@click.option("--schema", "schema_file", metavar="FILE", help="New JSON Schema.")
@click.option("--no-schema", is_flag=True, help="Drop the schema (payloads go unchecked).")
@click.option("--description", default=None, help="New description.")
@click.option("--example", "example_file", metavar="FILE", help="New example payload.")
@tenant_option
@internal_option
@click.option("--offer-to-all", "all_tenants", is_flag=True,
              help="Offer the type to every tenant again.")
@json_option
@pass_ctx
def update(ctx: Context, name: str, schema_file: str | None, no_schema: bool,
           description: str | None, example_file: str | None, tenants: tuple[str, ...],
           internal: bool, all_tenants: bool, as_json: bool) -> None:
    """Change NAME's schema, description, example or tenants (the example must match the
    schema)."""
    if no_schema and schema_file:
        raise click.UsageError("--schema and --no-schema exclude each other")
    if all_tenants and (tenants or internal):
        raise click.UsageError("--offer-to-all excludes --offer-to and --internal")
    offered = audience(tenants, internal)
    changes: dict[str, Any] = {
        "tenants": None if all_tenants else (_KEEP if offered is None else offered),
        "json_schema": None if no_schema else read_json(schema_file, "--schema"),
        "example": read_json(example_file, "--example"),
        "description": _KEEP if description is None else description}
    with ctx.connect() as conn:
        entry = catalog.update(conn, name, schema=ctx.schema,
                               **{k: v for k, v in changes.items() if v is not _KEEP})
    show(entry, as_json) if as_json else click.echo(f"updated {entry.name}")


@types.command("deprecate")
@click.argument("name")
@click.option("--undo", is_flag=True, help="Mark it current again.")
@json_option
@pass_ctx
def deprecate(ctx: Context, name: str, undo: bool, as_json: bool) -> None:
    """Mark NAME deprecated: still emitted (with a warning in the log), shown as deprecated
    in exports and the portal."""
    with ctx.connect() as conn:
        entry = catalog.deprecate(conn, name, schema=ctx.schema, deprecated=not undo)
    if as_json:
        show(entry, True)
    else:
        click.echo(f"{entry.name} is {'deprecated' if entry.deprecated else 'current'}")


@types.command("remove")
@click.argument("name")
@json_option
@pass_ctx
def remove(ctx: Context, name: str, as_json: bool) -> None:
    """Remove NAME from the catalog (stored events stay; its payloads go unchecked)."""
    with ctx.connect() as conn:
        catalog.remove(conn, name, schema=ctx.schema)
    echo_json({"removed": name}) if as_json else click.echo(f"removed {name}")


@types.command("publish")
@click.argument("modules", nargs=-1, required=True)
@json_option
@pass_ctx
def publish(ctx: Context, modules: tuple[str, ...], as_json: bool) -> None:
    """Import MODULES (from the current directory too) and write the pydantic models they
    register (outbox.types.register) to the catalog, in one transaction."""
    import outbox.types

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise click.BadParameter(f"cannot import {name}: {exc}",
                                     param_hint="MODULES") from None
    with ctx.connect() as conn, conn.transaction():
        changed = outbox.types.publish(conn, schema=ctx.schema)
    names = [r.name for r in outbox.types.registered()]
    if as_json:
        echo_json({"registered": names, "changed": changed})
        return
    click.echo(f"{len(names)} types registered, {len(changed)} changed"
               + (f": {', '.join(changed)}" if changed else ""))


@types.command("export")
@click.option("--format", "fmt", type=click.Choice(type_export.FORMATS), default="openapi",
              show_default=True, help="Document to write.")
@click.option("-o", "--output", default="-", metavar="FILE", help="Write here (default stdout).")
@click.option("--title", default="Webhooks", show_default=True, help="The document's title.")
@click.option("--version", "doc_version", default="1.0.0", show_default=True,
              help="The document's version.")
@pass_ctx
def export(ctx: Context, fmt: str, output: str, title: str, doc_version: str) -> None:
    """Describe the catalog for receivers: OpenAPI 3.1 (one webhook per type, with the
    Standard Webhooks headers), AsyncAPI 3.0, or a JSON Schema bundle."""
    with ctx.connect() as conn:
        found = catalog.list_all(conn, schema=ctx.schema)
    doc = type_export.export(found, fmt, title=title, version=doc_version)
    with click.open_file(output, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2) + "\n")
