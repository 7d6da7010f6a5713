"""``outbox prune``: drop expired partitions, delete finished deliveries and old events
past retention."""

from __future__ import annotations

import datetime as dt

import click

from outbox.admin import retention
from outbox.cli.output import echo_json, progress, when
from outbox.cli.params import Duration, tenant_option
from outbox.cli.root import Context, cli, pass_ctx


@cli.command()
@click.option("--older-than", type=Duration(minimum=dt.timedelta(minutes=1)), required=True,
              metavar="DURATION", help="Retention: keep what finished more recently "
              "(e.g. 7d, 36h, 90m; at least 1m).")
@click.option("--dead-too", is_flag=True,
              help="Also delete dead deliveries past retention (default: keep them for replay).")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Rows per transaction.")
@click.option("--dead-older-than", type=Duration(), default=None, metavar="DURATION",
              help="Dead-letter retention for partition drops: a partition whose dead "
                   "deliveries all died longer ago is dropped with them (default: dead "
                   "deliveries keep their partition, unless --dead-too).")
@tenant_option("Only deliveries of this tenant's events (whichever endpoint), and its events.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def prune(ctx: Context, older_than: dt.timedelta, dead_too: bool, batch_size: int,
          dead_older_than: dt.timedelta | None, tenant: str | None, as_json: bool) -> None:
    """Drop every partition of deliveries and attempt logs that holds nothing that must
    survive (`outbox partitions` says what blocks the others), then delete delivered
    deliveries (and their attempt logs) that finished more than DURATION ago, then events
    older than that with no delivery left.

    Pending deliveries are never touched; dead ones only with --dead-too. Each batch is
    its own short transaction, so it is safe to run while workers deliver, and safe to
    interrupt and run again. Pruned events take their idempotency keys with them. Run it
    from cron or a Kubernetes CronJob, e.g. hourly. With --tenant, only that tenant's
    deliveries and events go (e.g. a shorter retention for one customer), by DELETE only.

    \b
    Examples:
      outbox prune --older-than 7d
      outbox prune --older-than 30d --dead-too --batch-size 5000
      outbox prune --older-than 1d --tenant acme
    """
    with ctx.connect() as conn, progress("deliveries", None) as bar:
        result = retention.prune(conn, ctx.schema, older_than, dead_too=dead_too,
                                 batch_size=batch_size, progress=bar.step, tenant=tenant,
                                 dead_older_than=dead_older_than)
    if as_json:
        echo_json(result)
        return
    click.echo(f"deleted {result.deliveries} deliveries, {result.attempts} attempt-log rows "
               f"and {result.events} events finished or made before {when(result.cutoff)}; "
               f"dropped {result.partitions} partitions whole")
