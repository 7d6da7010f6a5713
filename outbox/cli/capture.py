"""``outbox capture``: emit an event per changed row of a table (outbox.admin.capture)."""

from __future__ import annotations

import click

from outbox.admin import capture as captures
from outbox.cli.root import Context, cli, pass_ctx


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


@cli.group()
def capture() -> None:
    """Capture table changes: a trigger emits one event per changed row, in the writing
    transaction (payload {"op", "table", "new", "old"}).

    \b
      outbox capture add orders --type order.changed --key id --columns id,status,total
      outbox capture list
      outbox capture remove orders
    """


@capture.command("add")
@click.argument("table")
@click.option("--type", "event_type", required=True, metavar="TYPE",
              help="The event type of every captured change, e.g. order.changed.")
@click.option("--key", metavar="COLUMN", help="Column whose value is the ordering key.")
@click.option("--tenant-column", "tenant", metavar="COLUMN",
              help="Column whose value is the event's tenant (every other command's "
                   "--tenant scopes it to a tenant; this one names a column).")
@click.option("--on", "on", default="insert,update,delete", show_default=True,
              metavar="OPS", help="Operations to capture, comma-separated.")
@click.option("--columns", metavar="A,B,C",
              help="Columns in the payload (default: all); an UPDATE changing none of "
                   "them emits nothing.")
@pass_ctx
def add_cmd(ctx: Context, table: str, event_type: str, key: str | None, tenant: str | None,
            on: str, columns: str | None) -> None:
    """Install (or replace) the capture of TABLE."""
    with ctx.connect() as conn, conn.cursor() as cur:
        done = captures.add(cur, table, type=event_type, schema=ctx.schema, key=key,
                            tenant=tenant, on=_csv(on) or [], columns=_csv(columns))
    click.echo(f"capturing {done.table}: {','.join(done.on)} -> {done.type}")


@capture.command("list")
@pass_ctx
def list_cmd(ctx: Context) -> None:
    """The captured tables."""
    with ctx.connect() as conn, conn.cursor() as cur:
        found = captures.list_captures(cur, schema=ctx.schema)
    if not found:
        click.echo("no table is captured")
    for c in found:
        click.echo(f"{c.table}\ttype={c.type}\ton={','.join(c.on)}\tkey={c.key or '-'}"
                   f"\ttenant={c.tenant or '-'}"
                   f"\tcolumns={','.join(c.columns) if c.columns else '*'}")


@capture.command("remove")
@click.argument("table")
@pass_ctx
def remove_cmd(ctx: Context, table: str) -> None:
    """Drop the capture of TABLE (its trigger)."""
    with ctx.connect() as conn, conn.cursor() as cur:
        captures.remove(cur, table, schema=ctx.schema)
    click.echo(f"no longer capturing {table}")
