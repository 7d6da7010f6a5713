"""``outbox endpoints update | rotate-secret | ping``: change and check an endpoint."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from outbox import endpoints as ep
from outbox.cli import Context, Failed, pass_ctx, worker_seam
from outbox.cli.endpoints import endpoint_json, endpoints, parse_headers, print_warnings
from outbox.cli.output import cut, echo_json, when
from outbox.cli.params import Duration, delivery_options, endpoint_options


@endpoints.command("update")
@click.argument("endpoint_id", metavar="ID")
@click.option("--url", default=None, help="New URL (pending deliveries go there too).")
@click.option("--event-type", "event_types", multiple=True, metavar="TYPE",
              help="Replace the event-type filter with these types (repeatable).")
@click.option("--all-event-types", is_flag=True, help="Remove the filter: every type.")
@click.option("--header", "headers", multiple=True, metavar="K=V",
              help="Add or replace a header (repeatable); others are kept.")
@click.option("--clear-headers", is_flag=True, help="Drop all custom headers first.")
@click.option("--description", default=None, help="Free text shown in listings.")
@click.option("--ordered/--unordered", default=None,
              help="Deliver events that share a key one at a time, in order (or stop). "
                   "Applies to events emitted from now on.")
@delivery_options
@click.option("--json", "as_json", is_flag=True, help="Print the endpoint as JSON.")
@pass_ctx
def update(ctx: Context, /, endpoint_id: str, url: str | None, event_types: tuple[str, ...],
           all_event_types: bool, headers: tuple[str, ...], clear_headers: bool,
           description: str | None, ordered: bool | None, as_json: bool,
           **values: Any) -> None:
    """Change an endpoint; options not given keep their value. Validated like `add`,
    including the address check of a new URL (see `outbox endpoints add --help`).

    \b
    Examples:
      outbox endpoints update 0193... --url https://hooks.example.com/v2
      outbox endpoints update 0193... --event-type invoice.paid --event-type invoice.void
      outbox endpoints update 0193... --clear-headers --header "X-Team=billing"
    """
    options = endpoint_options(values)
    changes: list[Any] = [url, event_types, all_event_types, headers, clear_headers,
                          description, *options.given().values()]
    if ordered is None and not any(c not in (None, False, ()) for c in changes):
        raise click.UsageError("nothing to update: give at least one option (see --help)")
    if event_types and all_event_types:
        raise click.UsageError("--event-type and --all-event-types contradict each other")
    parsed = parse_headers(headers)
    with ctx.connect() as conn:
        done = ep.update(
            conn, endpoint_id, schema=ctx.schema, url=url, event_types=event_types or None,
            all_event_types=all_event_types, headers=parsed, clear_headers=clear_headers,
            description=description, options=options, ordered=ordered,
            allow_networks=ctx.allow_networks() if url is not None else None,
        )
    print_warnings(done.warnings)
    if as_json:
        click.echo(json.dumps(endpoint_json(done.endpoint), indent=2))
        return
    e = done.endpoint
    click.echo(f"updated {e.id}")
    click.echo(f"  url:         {e.url}")
    click.echo(f"  event types: {', '.join(e.event_types) if e.event_types else '*'}")
    click.echo(f"  headers:     {', '.join(f'{k}={v}' for k, v in e.headers.items()) or '-'}")
    click.echo(f"  ordered:     {'yes' if e.ordered else 'no'}")


@endpoints.command("rotate-secret")
@click.argument("endpoint_id", metavar="ID")
@click.option("--grace", type=Duration(), default="24h", show_default=True,
              metavar="DURATION",
              help="How long the old secret keeps signing beside the new one (0 ends it now).")
@click.option("--secret", default=None, metavar="whsec_...",
              help="Use this new secret instead of generating one.")
@click.option("--force", is_flag=True,
              help="Rotate even though the previous rotation's grace is still running.")
@pass_ctx
def rotate_secret(ctx: Context, endpoint_id: str, grace: dt.timedelta, secret: str | None,
                  force: bool) -> None:
    """Give an endpoint a new signing secret, printed once.

    Until the grace period ends, every request carries two signatures (new and old), so
    the receiver can switch to the new secret whenever it likes; after it, only the new
    secret signs. Give the receiver the new secret within the grace period.

    \b
    Example:
      outbox endpoints rotate-secret 0193... --grace 48h
    """
    with ctx.connect() as conn:
        rotated = ep.rotate_secret(conn, endpoint_id, schema=ctx.schema, grace=grace,
                                   secret=secret, force=force)
    click.echo(f"id:     {rotated.endpoint.id}")
    if secret is None:
        click.echo(f"secret: {rotated.secret}")
        click.echo("(the secret is shown only now: store it with the receiver)", err=True)
    until = rotated.endpoint.previous_secret_expires_at
    click.echo(f"the old secret also signs until {when(until)}", err=True)


@endpoints.command("ping")
@click.argument("endpoint_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def ping(ctx: Context, endpoint_id: str, as_json: bool) -> None:
    """Send a signed `outbox.ping` event to an endpoint now, and show the answer.

    The request goes through the worker's own sender: same signing (both secrets during a
    rotation), headers, timeouts and SSRF guard ($OUTBOX_ALLOW_NETWORKS: a loopback or
    private address is refused unless allowed there). It is sent
    even if the endpoint is disabled, and nothing is written to the database. Exits 1
    unless the receiver answers 2xx.

    \b
    Example:
      outbox endpoints ping 0193...
    """
    with ctx.connect() as conn:
        endpoint = ep.get(conn, endpoint_id, schema=ctx.schema)
        secrets = ep.signing_secrets(conn, endpoint.id, schema=ctx.schema)
    result = worker_seam.ping(ctx.overrides, endpoint, secrets)
    if as_json:
        echo_json(result)
    else:
        click.echo(f"{endpoint.url}: {result.status or 'no answer'} in "
                   f"{result.duration_ms:.0f} ms ({result.verdict})")
        click.echo(f"webhook-id: {result.webhook_id}")
        if result.error:
            click.echo(f"error:      {result.error}")
        click.echo(f"response:   {cut(result.response, 300)}")
    if not result.ok:
        raise Failed(f"ping to {endpoint.url} failed: {result.error}")
