"""``outbox worker``: the delivery process (needs the ``worker`` extra)."""

from __future__ import annotations

from typing import Any

import click

from outbox import worker as worker_seam
from outbox.cli.root import Context, cli, pass_ctx

MAX_PROCESSES = 1024


class Processes(click.ParamType[int | None]):
    """``auto`` (None: one per CPU this process may use) or a whole number 1..1024."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return None
        # ASCII digits only: "²".isdigit() is true, and int("²") fails
        if text.isascii() and text.isdecimal() and 1 <= int(text) <= MAX_PROCESSES:
            return int(text)
        self.fail(f"{value!r} is not 'auto' or a whole number from 1 to {MAX_PROCESSES}",
                  param, ctx)


@cli.command()
@click.option("--drain", is_flag=True,
              help="Exit once nothing is due (future retries are left for a later run).")
@click.option("--processes", type=Processes(), default="1", envvar="OUTBOX_PROCESSES",
              show_default=True,
              help="Worker processes under one supervisor, or 'auto' for one per CPU"
                   " ($OUTBOX_PROCESSES).")
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=None,
              help="Most requests in flight per process (default: $OUTBOX_CONCURRENCY=1000).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve /metrics, /healthz, /readyz here; 0: not at all"
                   " (default: $OUTBOX_METRICS_PORT=9464).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", type=click.Choice(["json", "text"]), default=None,
              help="Log lines as JSON objects or text (default: $OUTBOX_LOG_FORMAT=json).")
@pass_ctx
def worker(ctx: Context, drain: bool, processes: int | None, concurrency: int | None,
           metrics_port: int | None, log_level: str, log_format: str | None) -> None:
    """Deliver pending webhooks: claim, sign, POST, record; retry with backoff.

    Run as many workers as you like, on as many hosts: they share the work through
    SKIP LOCKED claims. On one host, `--processes auto` runs one worker process per CPU
    under a supervisor that replaces any that dies and serves one /metrics, /healthz and
    /readyz for all of them. SIGTERM or Ctrl-C stops claiming, lets in-flight requests
    finish within $OUTBOX_SHUTDOWN_GRACE_SECONDS, and exits 0.

    Another worker on the same host already serving the default metrics port (9464): this
    one warns and runs without them. A port set with --metrics-port or
    $OUTBOX_METRICS_PORT that is taken is an error.

    \b
    Examples:
      outbox worker
      outbox worker --processes auto
      outbox worker --concurrency 200
      outbox worker --drain          # deliver what is due now, then exit
    """
    overrides = dict(ctx.overrides)
    if concurrency:
        overrides["concurrency"] = concurrency
    if metrics_port is not None:
        overrides["metrics_port"] = metrics_port
    stats = worker_seam.run_worker(overrides, drain=drain, log_format=log_format,
                                   log_level=log_level, processes=processes)
    click.echo(" ".join(f"{k}={v}" for k, v in stats.items()), err=True)
