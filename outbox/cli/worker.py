"""``outbox worker``: the delivery process (needs the ``worker`` extra)."""

from __future__ import annotations

import click

from outbox.cli import Context, cli, pass_ctx, worker_seam


@cli.command()
@click.option("--drain", is_flag=True,
              help="Exit once nothing is due (future retries are left for a later run).")
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=None,
              help="Most requests in flight in this process (default: $OUTBOX_CONCURRENCY=100).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", type=click.Choice(["json", "text"]), default=None,
              help="Log lines as JSON objects or text (default: $OUTBOX_LOG_FORMAT=json).")
@pass_ctx
def worker(ctx: Context, drain: bool, concurrency: int | None, log_level: str,
           log_format: str | None) -> None:
    """Deliver pending webhooks: claim, sign, POST, record; retry with backoff.

    Run as many processes as you like, on as many hosts: they share the work through
    SKIP LOCKED claims. SIGTERM or Ctrl-C stops claiming, lets in-flight requests
    finish within $OUTBOX_SHUTDOWN_GRACE_SECONDS, and exits 0.

    \b
    Examples:
      outbox worker
      outbox worker --concurrency 200
      outbox worker --drain          # deliver what is due now, then exit
    """
    overrides = dict(ctx.overrides)
    if concurrency:
        overrides["concurrency"] = concurrency
    stats = worker_seam.run_worker(overrides, drain=drain, log_format=log_format,
                                   log_level=log_level)
    click.echo(" ".join(f"{k}={v}" for k, v in stats.items()), err=True)
