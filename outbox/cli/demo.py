"""``outbox demo``: emit events in transactions and deliver them to a local receiver."""

from __future__ import annotations

import click

from outbox import worker as worker_seam
from outbox.cli.root import Context, cli, pass_ctx
from outbox.testing import postgres


@cli.command()
@click.option("--events", type=click.IntRange(1, 10_000), default=12, show_default=True,
              help="How many events to emit.")
@pass_ctx
def demo(ctx: Context, events: int) -> None:
    """Emit events inside transactions and deliver them, signed, to a local receiver.

    Uses --database-url, $OUTBOX_DATABASE_URL or $DATABASE_URL, else the local server,
    else starts a throwaway PostgreSQL. Works in schema 'outbox_demo' (recreated each run)
    unless --schema is given. Needs the worker extra.

    \b
    Example:
      outbox demo --events 20
    """
    run_demo = worker_seam.demo_runner()
    url = postgres.for_demo(ctx.overrides.get("database_url"))
    click.echo(f"PostgreSQL: {url}")
    run_demo(url, ctx.overrides.get("schema_name", "outbox_demo"), events)
