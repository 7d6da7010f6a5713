"""``outbox demo``: emit events in transactions and show what was written."""

from __future__ import annotations

import os

import click
import psycopg

import outbox
from outbox import devdb
from outbox import endpoints as ep
from outbox.cli import Context, cli, pass_ctx
from outbox.migrate import migrate


@cli.command()
@click.option("--events", default=20, show_default=True, help="How many events to emit.")
@pass_ctx
def demo(ctx: Context, events: int) -> None:
    """Migrate, register an endpoint, emit events inside transactions, show the backlog.

    Uses $OUTBOX_DATABASE_URL / $DATABASE_URL, else the local server, else starts a
    throwaway PostgreSQL. Tables go to schema 'outbox_demo' unless --schema is given.
    """
    url = ctx.overrides.get("database_url") or os.environ.get("OUTBOX_DATABASE_URL") or \
        os.environ.get("DATABASE_URL")
    url = devdb.find_or_start(url)
    schema = ctx.overrides.get("schema_name", "outbox_demo")
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, schema)
        created = ep.add(conn, "http://127.0.0.1:9/demo", schema=schema,
                         description="demo endpoint")
        click.echo(f"endpoint {created.endpoint.id}")
        for i in range(events):
            with conn.transaction():
                outbox.emit(conn, outbox.Event("demo.created", {"n": i}), schema=schema)
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.deliveries WHERE state = 'pending'".encode()
        ).fetchone()
    click.echo(f"emitted {events} events; {row[0] if row else 0} deliveries pending")
