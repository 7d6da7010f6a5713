"""``outbox partitions``: the partitions of the delivery history, and what blocks each drop."""

from __future__ import annotations

import datetime as dt
import uuid

import click

from outbox.admin import partitions as parts
from outbox.cli.output import echo_json, print_table, when
from outbox.cli.params import Duration
from outbox.cli.root import Context, cli, pass_ctx


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


@cli.command()
@click.option("--older-than", type=Duration(), default="7d", show_default=True,
              metavar="DURATION",
              help="Retention to judge droppability by (the workers use "
                   "OUTBOX_RETENTION_SECONDS).")
@click.option("--dead-older-than", type=Duration(), default="14d", show_default=True,
              metavar="DURATION",
              help="Dead-letter retention (the workers use OUTBOX_DEAD_RETENTION_SECONDS); "
                   "0s: dead deliveries are kept for ever.")
@click.option("--events", "of_events", is_flag=True,
              help="List the partitions of events instead (by event-id time range).")
@click.option("--json", "as_json", is_flag=True, help="Print the partitions as JSON.")
@pass_ctx
def partitions(ctx: Context, older_than: dt.timedelta, dead_older_than: dt.timedelta,
               of_events: bool, as_json: bool) -> None:
    """List the partitions of deliveries and attempt logs, oldest first: their delivery-id
    range, when emits wrote to them, estimated rows, size, and whether the next prune
    drops them, or what blocks it (pending or ordered deliveries, a dead delivery kept for
    replay, a dead head holding its ordered key, rows finished within retention).
    Reads only. `outbox prune` drops the droppable ones; the workers do it on their own.

    With --events, the partitions of events: their event-id range as times (UUIDv7 ids
    carry their emitting clock's millisecond), and whether the next prune drops them or
    what blocks it (ids within retention, deliveries still referring to their events).
    Events outside every partition (a host clock far ahead, or emitted before a worker
    first ran) are in events_default, pruned row by row.

    \b
    Examples:
      outbox partitions
      outbox partitions --older-than 1d --json
      outbox partitions --events
    """
    if of_events:
        _events(ctx, older_than, as_json)
        return
    dead = dead_older_than if dead_older_than else None
    with ctx.connect() as conn:
        rows = parts.status(conn, ctx.schema, older_than, dead)
    if as_json:
        echo_json([{**{f: getattr(p, f) for f in p.__slots__}, "droppable": p.droppable}
                   for p in rows])
        return
    print_table(["partition", "ids", "opened", "closed", "rows", "size", "droppable"], [
        [p.deliveries, f"{'' if p.lo is None else p.lo}..{p.hi}", when(p.opened_at),
         when(p.closed_at), str(p.rows_estimate), _size(p.bytes),
         "yes" if p.droppable else f"no: {p.blocked_by}"] for p in rows])


def _uuid7_time(u: uuid.UUID | None) -> str:
    if u is None:
        return when(None)
    return when(dt.datetime.fromtimestamp((u.int >> 80) / 1000, tz=dt.UTC))


def _events(ctx: Context, older_than: dt.timedelta, as_json: bool) -> None:
    with ctx.connect() as conn:
        rows = parts.event_status(conn, ctx.schema, older_than)
    if as_json:
        echo_json([{**{f: getattr(p, f) for f in p.__slots__}, "droppable": p.droppable}
                   for p in rows])
        return
    print_table(["partition", "from", "to", "rows", "size", "droppable"], [
        [p.name, _uuid7_time(p.lo), _uuid7_time(p.hi), str(p.rows_estimate), _size(p.bytes),
         "yes" if p.droppable else f"no: {p.blocked_by}"] for p in rows])
