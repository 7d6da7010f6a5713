"""``outbox replay``: put dead deliveries back in the queue, in short batches."""

from __future__ import annotations

import datetime as dt
import getpass
import socket

import click

from outbox.admin import replay as rp
from outbox.cli.dead import make_selection, selection_options
from outbox.cli.output import echo_json, print_table, progress
from outbox.cli.root import Context, cli, pass_ctx
from outbox.errors import OperationRefused


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"replay by {user}@{socket.gethostname()}"


def _print_plan(plan: rp.ReplayPlan, dry_run: bool) -> None:
    verb = "would replay" if dry_run else "replaying"
    click.echo(f"{verb} {plan.total} dead deliveries to {len(plan.endpoints)} endpoint(s)")
    print_table(
        ["endpoint", "url", "enabled", "dead"],
        [[str(e.endpoint_id), e.url or "(deleted)",
          "yes" if e.enabled else f"no ({e.disabled_reason or '?'})", str(e.count)]
         for e in plan.endpoints],
    )


@cli.command()
@click.option("--id", "ids", type=click.IntRange(min=1), multiple=True, metavar="ID",
              help="This dead delivery (repeatable).")
@selection_options
@click.option("--all", "all_", is_flag=True,
              help="Every dead delivery (of --tenant's events if given; needed when no other "
                   "selector is given).")
@click.option("--dry-run", is_flag=True, help="Print what would be replayed; change nothing.")
@click.option("--enable-endpoint", is_flag=True,
              help="Enable disabled endpoints among the selection first (else refused).")
@click.option("--batch-size", type=click.IntRange(1, 50_000), default=1000, show_default=True,
              help="Rows per transaction.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def replay(ctx: Context, ids: tuple[int, ...], endpoint_id: str | None, event_type: str | None,
           since: dt.datetime | None, until: dt.datetime | None, tenant: str | None,
           all_: bool, dry_run: bool, enable_endpoint: bool, batch_size: int,
           as_json: bool) -> None:
    """Re-queue dead deliveries: workers deliver them again with the same webhook-id.

    Selectors combine (all must match); at least one is required, and --all must be
    given explicitly to replay everything. --tenant is a scope, not a selector: with it,
    every selector (and --all) picks only deliveries of that tenant's events, whichever
    endpoint they go to, and no other tenant's row is touched. Each replayed delivery
    starts afresh (attempt count 0, due now) and its attempt log records the replay.
    Only rows still dead are touched: replaying twice, or while workers deliver, never
    makes a duplicate. Rows go in batches, each its own short transaction; Ctrl-C keeps
    the finished batches and running the same command again finishes the rest. Dead
    deliveries of a disabled endpoint are refused unless --enable-endpoint.

    \b
    Examples:
      outbox replay --endpoint 0193... --since 2h --dry-run
      outbox replay --id 4711 --id 4712
      outbox replay --event-type invoice.paid --enable-endpoint
      outbox replay --tenant acme --all --dry-run
      outbox replay --all
    """
    filtered = bool(ids or endpoint_id or event_type or since or until)
    if all_ and filtered:
        raise click.UsageError("--all replays every dead delivery (of --tenant's events if "
                               "given): drop the other selectors")
    if not all_ and not filtered:
        raise click.UsageError(
            "say what to replay: --id, --endpoint, --event-type, --since/--until, or --all")
    selection = make_selection(endpoint_id, event_type, since, until, tenant, ids)
    with ctx.connect() as conn:
        plan = rp.plan_replay(conn, schema=ctx.schema, selection=selection)
        if not as_json:
            _print_plan(plan, dry_run)
        reason = rp.refusal(plan)
        if reason and not enable_endpoint:
            raise OperationRefused(reason)
        if dry_run:
            if as_json:
                echo_json({"dry_run": True, "total": plan.total, "endpoints": plan.endpoints})
            return
        with progress("replaying", plan.total) as update:
            result = rp.replay(conn, schema=ctx.schema, selection=selection,
                               batch_size=batch_size, enable_endpoints=enable_endpoint,
                               actor=_actor(), progress=update)
    if as_json:
        echo_json(result)
        return
    for endpoint in result.enabled_endpoints:
        click.echo(f"enabled endpoint {endpoint}")
    skipped = f"; {result.skipped} no longer dead, left alone" if result.skipped else ""
    click.echo(f"replayed {result.replayed} deliveries in {result.batches} batch(es){skipped}")
