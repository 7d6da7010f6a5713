"""``outbox migrate``: apply the schema, or print it for a DBA."""

from __future__ import annotations

import click

from outbox.admin.migrations import migrate as apply_migrations
from outbox.admin.migrations import script
from outbox.cli.root import Context, cli, pass_ctx


@cli.command()
@click.option("--print", "print_only", is_flag=True,
              help="Print the SQL of every migration instead of applying it (no connection).")
@click.option("--inbox", is_flag=True,
              help="The receiving side's inbox table only (outbox.inbox), not the sender's.")
@pass_ctx
def migrate(ctx: Context, print_only: bool, inbox: bool) -> None:
    """Create or upgrade the outbox tables in the configured schema.

    Safe to run from many processes at once (an advisory lock serialises them) and a
    no-op when the schema is current. All pending migrations apply in one transaction.
    With --inbox: only the inbox table a receiving service needs (its own series).

    \b
    Examples:
      outbox migrate
      OUTBOX_SCHEMA=webhooks outbox migrate
      outbox migrate --print > outbox.sql && psql -f outbox.sql
      outbox migrate --inbox              # a service that receives webhooks
    """
    if print_only:
        click.echo(script(ctx.schema, inbox=inbox), nl=False)
        return
    with ctx.connect() as conn:
        applied = apply_migrations(conn, ctx.schema, inbox=inbox)
    what = "inbox of schema" if inbox else "schema"
    if not applied:
        click.echo(f"{what} {ctx.schema!r} is up to date")
    prefix = "inbox_" if inbox else ""
    for m in applied:
        click.echo(f"applied {prefix}{m.version:04d}_{m.name} to schema {ctx.schema!r}")
