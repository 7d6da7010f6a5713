"""``outbox inbox``: the receiving side's dedupe table (see :mod:`outbox.inbox`)."""

from __future__ import annotations

import datetime as dt

import click

from outbox import inbox as inbox_lib
from outbox.cli.output import echo_json, when
from outbox.cli.params import Duration
from outbox.cli.root import Context, cli, pass_ctx


@cli.group()
def inbox() -> None:
    """The inbox of a service that receives webhooks (created by `outbox migrate --inbox`)."""


@inbox.command()
@click.option("--older-than", type=Duration(minimum=dt.timedelta(minutes=1)), required=True,
              metavar="DURATION", help="Delete ids received more than DURATION ago "
              "(e.g. 72h, 7d; at least 72h unless --force).")
@click.option("--force", is_flag=True,
              help="Allow a window shorter than the sender's 72 h retry horizon.")
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), default=10_000,
              show_default=True, help="Rows per transaction.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def prune(ctx: Context, older_than: dt.timedelta, force: bool, batch_size: int,
          as_json: bool) -> None:
    """Delete processed webhook ids received more than DURATION ago.

    The window must exceed the sender's maximum retry horizon (72 h by default): a webhook
    retried after its id was pruned would be processed a second time. A shorter window is
    refused, with nothing deleted, unless --force. Each batch is its own short
    transaction: safe while requests are being received, and safe to interrupt.

    \b
    Examples:
      outbox inbox prune --older-than 7d
      outbox inbox prune --older-than 1h --force    # your sender stops retrying sooner
    """
    inbox_lib.check_window(older_than, force=force)  # refused before connecting
    with ctx.connect() as conn:
        result = inbox_lib.prune(conn, ctx.schema, older_than, force=force,
                                 batch_size=batch_size)
    if as_json:
        echo_json(result)
        return
    click.echo(f"deleted {result.deleted} inbox ids received before {when(result.cutoff)}")
