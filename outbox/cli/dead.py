"""``outbox dead``: list and inspect dead deliveries (read-only)."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import socket

import click

from outbox.admin import deadletter as dl
from outbox.admin.endpoints import parse_id
from outbox.cli.output import cut, echo_json, print_table, when
from outbox.cli.params import TIME_HELP, When, check_range, tenant_option
from outbox.cli.root import Context, cli, pass_ctx


def selection_options(func: click.decorators.FC) -> click.decorators.FC:
    """``--endpoint``, ``--event-type``, ``--since``, ``--until``, ``--tenant`` (shared with
    replay)."""
    for option in reversed([
        click.option("--endpoint", "endpoint_id", metavar="ID", default=None,
                     help="Only deliveries to this endpoint."),
        click.option("--event-type", default=None, metavar="TYPE",
                     help="Only events of this type."),
        click.option("--since", type=When(), default=None, metavar="WHEN",
                     help="Only deliveries that died at or after WHEN. " + TIME_HELP),
        click.option("--until", type=When(), default=None, metavar="WHEN",
                     help="Only deliveries that died before WHEN."),
        tenant_option("Only deliveries of this tenant's events (whichever endpoint)."),
    ]):
        func = option(func)
    return func


def make_selection(endpoint_id: str | None, event_type: str | None, since: dt.datetime | None,
                   until: dt.datetime | None, tenant: str | None,
                   ids: tuple[int, ...] = ()) -> dl.Selection:
    """The library selection; an unknown-looking endpoint id is ``error: no endpoint``, a
    malformed tenant id ``error: tenant ...`` (exit 1, before any SQL)."""
    check_range(since, until)
    return dl.Selection(ids=ids, endpoint_id=parse_id(endpoint_id) if endpoint_id else None,
                        event_type=event_type, since=since, until=until, tenant=tenant)


@cli.group()
def dead() -> None:
    """Inspect dead deliveries: the ones that will not be retried.

    A delivery is dead when its attempts are exhausted, the receiver refused it for good
    (4xx other than 408/425/429, any redirect), answered 410 Gone, or its URL is not
    allowed by the SSRF guard. `outbox replay` puts dead deliveries back in the queue.

    \b
    Examples:
      outbox dead list --since 1h
      outbox dead list --endpoint 0193... --event-type invoice.paid --json
      outbox dead list --tenant acme
      outbox dead show 4711
      outbox dead skip 4711
    """


@dead.command("list")
@selection_options
@click.option("--limit", type=click.IntRange(min=0), default=50, show_default=True,
              help="Most rows shown, most recently dead first; 0 for all.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array, for scripts.")
@pass_ctx
def list_(ctx: Context, endpoint_id: str | None, event_type: str | None,
          since: dt.datetime | None, until: dt.datetime | None, tenant: str | None,
          limit: int, as_json: bool) -> None:
    """List dead deliveries, most recently dead first.

    \b
    Example:
      outbox dead list --since 2024-05-01T00:00Z --until 6h --limit 20
    """
    selection = make_selection(endpoint_id, event_type, since, until, tenant)
    with ctx.connect() as conn:
        rows = list(dl.each_dead(conn, schema=ctx.schema, selection=selection,
                                 limit=limit or None))
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no dead deliveries match", err=True)
        return
    print_table(
        ["delivery", "event", "type", "endpoint url", "attempts", "status", "last error",
         "died"],
        [[str(r.id), str(r.event_id), r.event_type or "-", r.url or str(r.endpoint_id),
          str(r.attempts), str(r.last_status or "-"), cut(r.last_error, 50),
          when(r.finished_at)] for r in rows],
    )


@dead.command("show")
@click.argument("delivery_id", metavar="DELIVERY_ID")
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for scripts.")
@pass_ctx
def show(ctx: Context, delivery_id: str, as_json: bool) -> None:
    """Show one delivery (any state), its event payload and its whole attempt log.

    \b
    Example:
      outbox dead show 4711
    """
    with ctx.connect() as conn:
        d = dl.show(conn, delivery_id, schema=ctx.schema)
    if as_json:
        echo_json(d)
        return
    fields = [
        ("delivery", str(d.id)), ("state", d.state + (" (leased)" if d.leased else "")),
        ("event", f"{d.event_id}  (webhook-id)"), ("type", d.event_type or "-"),
        ("endpoint", f"{d.endpoint_id}  {d.endpoint_url or '(deleted)'}"
         + ("" if d.endpoint_enabled else "  [disabled]")),
        ("attempts", str(d.attempts)), ("last status", str(d.last_status or "-")),
        ("last error", d.last_error or "-"), ("emitted", when(d.emitted_at)),
        ("created", when(d.created_at)),
        ("died" if d.state == "dead" else "finished", when(d.finished_at)),
    ]
    if d.state == "pending":
        fields.append(("next attempt", when(d.visible_at)))
    if d.blocking:
        fields.append(("blocks its key", f"yes: {d.held_back} later deliveries wait (replay"
                       f" it, or `outbox dead skip {d.id}`)"))
    elif d.held_back:
        fields.append(("key queue", f"{d.held_back} later deliveries wait for it"))
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        click.echo(f"{name.ljust(width)}  {value}")
    click.echo("\npayload:")
    click.echo(_pretty(d.payload))
    click.echo(f"\nattempt log ({len(d.log)}):")
    print_table(
        ["#", "at", "outcome", "status", "ms", "error", "response", "by"],
        [[str(a.attempt), when(a.created_at), a.outcome, str(a.status_code or "-"),
          f"{a.duration_ms:.0f}" if a.duration_ms is not None else "-",
          cut(" ".join(x for x in (a.error_class, a.error) if x), 60),
          cut(a.response_excerpt, 40), a.worker or "-"] for a in d.log],
    )


def _pretty(payload: str | None) -> str:
    if payload is None:
        return "(event pruned)"
    try:
        return json.dumps(json.loads(payload), indent=2, ensure_ascii=False)
    except ValueError:
        return payload


@dead.command("skip")
@click.argument("delivery_ids", metavar="DELIVERY_ID...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def skip(ctx: Context, delivery_ids: tuple[str, ...], as_json: bool) -> None:
    """Release the key a dead delivery of an ordered endpoint holds, without it.

    A dead delivery of an ordered endpoint blocks its key: the key's later deliveries wait
    (`outbox stats` shows them as blocked). `outbox replay --id ID` sends it again and
    the key resumes in order; `dead skip` gives up on it instead: it stays dead, its
    attempt log records the skip, and the key's next delivery goes out now. Skipping
    again, or a delivery that holds no key, changes nothing. A delivery that is not dead
    is refused.

    \b
    Example:
      outbox dead skip 4711
    """
    with ctx.connect() as conn:
        result = dl.skip(conn, delivery_ids, schema=ctx.schema, actor=_actor("skip"))
    if as_json:
        echo_json(result)
        return
    for i in result.skipped:
        click.echo(f"skipped {i}: its key goes on without it")
    for i in result.unchanged:
        click.echo(f"{i} holds no key (skipped before, or not ordered): unchanged")


def _actor(verb: str) -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{verb} by {user}@{socket.gethostname()}"
