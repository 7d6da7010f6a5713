"""``outbox stats``: the queue per endpoint, once or continuously."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time

import click

from outbox import stats as st
from outbox.cli import Context, cli, pass_ctx
from outbox.cli.output import cut, print_table, to_jsonable
from outbox.timeparse import format_duration


def _snapshot(ctx: Context) -> tuple[list[st.EndpointStats], st.DueSummary]:
    with ctx.connect() as conn:
        return (st.by_endpoint(conn, schema=ctx.schema),
                st.due_summary(conn, schema=ctx.schema))


def _print(rows: list[st.EndpointStats], due: st.DueSummary) -> None:
    table = [
        [str(r.endpoint_id), r.url + ("" if r.enabled else " [disabled]"), str(r.pending),
         str(r.due), str(r.in_flight), str(r.delivered_1h), str(r.dead_1h),
         "-" if r.oldest_due_seconds is None else format_duration(r.oldest_due_seconds),
         cut(r.last_error, 40)]
        for r in rows
    ]
    print_table(["endpoint", "url", "pending", "due", "in flight", "delivered 1h",
                 "dead 1h", "oldest due", "last error"], table)
    oldest = "-" if due.oldest_due_seconds is None else format_duration(due.oldest_due_seconds)
    click.echo(f"due now: {due.due}, oldest due: {oldest}")


def _as_json(rows: list[st.EndpointStats], due: st.DueSummary) -> str:
    return json.dumps({"at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                       "due": to_jsonable(due), "endpoints": to_jsonable(rows)})


@cli.command()
@click.option("--json", "as_json", is_flag=True,
              help="JSON for scripts (with --watch: one JSON object per line).")
@click.option("--watch", type=click.FloatRange(min=0.2), is_flag=False, flag_value=2.0,
              default=None, metavar="[SECONDS]",
              help="Refresh every SECONDS (2 if omitted) until Ctrl-C.")
@click.option("--iterations", type=click.IntRange(min=1), default=None, hidden=True)
@pass_ctx
def stats(ctx: Context, as_json: bool, watch: float | None, iterations: int | None) -> None:
    """Per endpoint: pending, due now, in flight, delivered and dead in the last hour,
    how long the oldest due delivery has waited, and the last error.

    Cheap enough to run every few seconds: it reads the partial indexes of the backlog
    and the last hour of finished deliveries, never the whole history.

    \b
    Examples:
      outbox stats
      outbox stats --watch 5
      outbox stats --json | jq '.endpoints[] | select(.dead_1h > 0)'
    """
    shown = 0
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            rows, due = _snapshot(ctx)
            if as_json:
                click.echo(_as_json(rows, due) if watch else
                           json.dumps(json.loads(_as_json(rows, due)), indent=2))
            else:
                if watch and shown:
                    click.clear()
                if watch:
                    click.echo(f"every {watch:g}s, Ctrl-C to stop   "
                               f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%SZ}")
                _print(rows, due)
            shown += 1
            if watch is None or (iterations is not None and shown >= iterations):
                return
            time.sleep(watch)
