"""``outbox endpoints show | update | rotate-secret | ping``: see, change and check an
endpoint."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from outbox import worker as worker_seam
from outbox.admin import endpoints as ep
from outbox.admin import flow
from outbox.admin.endpoint_oauth2 import client_secret
from outbox.cli.endpoints import endpoint_json, endpoints, parse_headers, print_warnings
from outbox.cli.filter_params import filter_option, filter_text, read_json_arg
from outbox.cli.output import cut, echo_json, to_jsonable, when
from outbox.cli.params import (
    Duration,
    credential_options,
    delivery_options,
    endpoint_credentials,
    endpoint_options,
    oauth2_flags,
    oauth2_of,
    rate_options,
)
from outbox.cli.root import Context, Failed, pass_ctx


@endpoints.command("show")
@click.argument("endpoint_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The endpoint and its flow state as JSON.")
@pass_ctx
def show(ctx: Context, endpoint_id: str, as_json: bool) -> None:
    """One endpoint's settings, and its flow control now: the rate every worker together
    may send at (its fixed limit, lowered while the endpoint answers 429/503 or times out)
    and whether it is throttled or paused by Retry-After (docs: Flow control)."""
    with ctx.connect() as conn:
        e = ep.get(conn, endpoint_id, schema=ctx.schema)
        state = flow.state(conn, e.id, schema=ctx.schema)
    if as_json:
        flow_json = {k: v for k, v in to_jsonable(state).items() if k != "endpoint_id"}
        click.echo(json.dumps({**endpoint_json(e), "flow": flow_json}, indent=2))
        return
    click.echo(f"id:           {e.id}")
    click.echo(f"url:          {e.url}")
    click.echo(f"tenant:       {'(all)' if e.all_tenants else e.tenant or '-'}")
    click.echo(f"enabled:      {'yes' if e.enabled else f'no ({e.disabled_reason})'}")
    click.echo(f"event types:  {', '.join(e.event_types) if e.event_types else '*'}")
    click.echo(f"ordered:      {'yes' if e.ordered else 'no'}")
    click.echo(f"headers:      {headers_text(e)}")
    click.echo(f"auth:         {auth_text(e)}")
    click.echo(f"signature:    {e.signature}")
    for key in ep.public_keys(e):
        until = f" (previous, signs until {when(key.expires_at)})" if key.expires_at else ""
        click.echo(f"public key:   {key.key}{until}")
    click.echo(f"filter:       {filter_text(e.filter)}")
    click.echo(f"rate limit:   {rate_text(e)}")
    click.echo(f"oauth2:       {oauth2_text(e)}")
    click.echo(f"allowed rate: {flow.describe(state)}")
    click.echo(f"throttled:    {state.throttled_total} time(s) so far")


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
@credential_options(update=True)
@delivery_options
@rate_options
@click.option("--no-rate-limit", "clear_rate_limit", is_flag=True,
              help="Remove the fixed rate limit and burst (adaptive throttling stays).")
@oauth2_flags
@click.option("--no-oauth2", "clear_oauth2", is_flag=True,
              help="Remove OAuth2 (the token URL, client id, secret and scope).")
@filter_option(update=True)
@click.option("--json", "as_json", is_flag=True, help="Print the endpoint as JSON.")
@pass_ctx
def update(ctx: Context, /, endpoint_id: str, url: str | None, event_types: tuple[str, ...],
           all_event_types: bool, headers: tuple[str, ...], clear_headers: bool,
           description: str | None, ordered: bool | None, rate_limit: float | None,
           rate_burst: int | None, clear_rate_limit: bool, clear_oauth2: bool, as_json: bool,
           payload_filter: str | None, clear_filter: bool, **values: Any) -> None:
    """Change an endpoint; options not given keep their value. Validated like `add`,
    including the address check of a new URL (see `outbox endpoints add --help`).

    \b
    Examples:
      outbox endpoints update 0193... --url https://hooks.example.com/v2
      outbox endpoints update 0193... --event-type invoice.paid --event-type invoice.void
      outbox endpoints update 0193... --clear-headers --header "X-Team=billing"
      outbox endpoints update 0193... --rate-limit 50 --burst 100
      outbox endpoints update 0193... --bearer-token "$NEW_TOKEN"   # rotates it
      outbox endpoints update 0193... --no-auth
      outbox endpoints update 0193... --oauth2-client-secret "$NEW_SECRET"
      outbox endpoints update 0193... --filter '{"region": "eu"}'
    """
    options = endpoint_options(values)
    credentials = endpoint_credentials(values, parse_headers)
    oauth2 = oauth2_of(values)
    changes: list[Any] = [url, event_types, all_event_types, headers, clear_headers,
                          description, *options.given().values(), rate_limit, rate_burst,
                          clear_rate_limit, *credentials.model_dump().values(),
                          *oauth2.given().values(), clear_oauth2, payload_filter,
                          clear_filter]
    if ordered is None and not any(c not in (None, False, ()) for c in changes):
        raise click.UsageError("nothing to update: give at least one option (see --help)")
    if event_types and all_event_types:
        raise click.UsageError("--event-type and --all-event-types contradict each other")
    if clear_rate_limit and (rate_limit is not None or rate_burst is not None):
        raise click.UsageError("--no-rate-limit contradicts --rate-limit and --burst")
    if clear_filter and payload_filter is not None:
        raise click.UsageError("--no-filter contradicts --filter")
    parsed = parse_headers(headers)
    with ctx.connect() as conn:
        done = ep.update(
            conn, endpoint_id, schema=ctx.schema, url=url, event_types=event_types or None,
            all_event_types=all_event_types, headers=parsed, clear_headers=clear_headers,
            description=description, options=options, ordered=ordered,
            rate_limit=rate_limit, rate_burst=rate_burst, clear_rate_limit=clear_rate_limit,
            allow_networks=ctx.allow_networks(), credentials=credentials, oauth2=oauth2,
            clear_oauth2=clear_oauth2, filter=read_json_arg(payload_filter, "--filter"),
            clear_filter=clear_filter,
        )
    print_warnings(done.warnings)
    if as_json:
        click.echo(json.dumps(endpoint_json(done.endpoint), indent=2))
        return
    e = done.endpoint
    click.echo(f"updated {e.id}")
    click.echo(f"  url:         {e.url}")
    click.echo(f"  event types: {', '.join(e.event_types) if e.event_types else '*'}")
    click.echo(f"  headers:     {headers_text(e)}")
    click.echo(f"  auth:        {auth_text(e)}")
    click.echo(f"  ordered:     {'yes' if e.ordered else 'no'}")
    click.echo(f"  filter:      {filter_text(e.filter)}")
    click.echo(f"  rate limit:  {rate_text(e)}")
    click.echo(f"  oauth2:      {oauth2_text(e)}")


def headers_text(e: ep.Endpoint) -> str:
    """``X-Team=billing, X-Api-Key=[redacted]``: a secret header by its name only."""
    shown = [f"{k}={v}" for k, v in e.headers.items()]
    shown += [f"{name}=[redacted]" for name in e.secret_headers]
    return ", ".join(shown) or "-"


def auth_text(e: ep.Endpoint) -> str:
    """``bearer; TLS client certificate CN=... (expires ...)``, or ``-``: never a secret."""
    parts = [e.auth_kind] if e.auth_kind else []
    if e.tls_client_cert_subject is not None:
        parts.append(f"TLS client certificate {e.tls_client_cert_subject or '(no subject)'}"
                     f" (expires {when(e.tls_client_cert_expires_at)})")
    return "; ".join(parts) or "-"


def rate_text(e: ep.Endpoint) -> str:
    """``50/s, burst 100`` (the tenant's own lower limit too), or ``-``."""
    if e.rate_limit is None and e.tenant_rate_limit is None:
        return "-"
    parts = []
    if e.rate_limit is not None:
        parts.append(f"{e.rate_limit:g}/s, burst {e.rate_burst or max(1, int(e.rate_limit))}")
    if e.tenant_rate_limit is not None:
        parts.append(f"tenant's own {e.tenant_rate_limit:g}/s")
    return "; ".join(parts)


def oauth2_text(e: ep.Endpoint) -> str:
    """``client ID at URL, scope S`` (never the secret), or ``-``."""
    if e.oauth2_token_url is None:
        return "-"
    scope = f", scope {e.oauth2_scope}" if e.oauth2_scope else ""
    return f"client {e.oauth2_client_id} at {e.oauth2_token_url}{scope}"


@endpoints.command("rotate-secret")
@click.argument("endpoint_id", metavar="ID")
@click.option("--grace", type=Duration(), default="24h", show_default=True,
              metavar="DURATION",
              help="How long the old secret keeps signing beside the new one (0 ends it now).")
@click.option("--secret", default=None, metavar="whsec_...",
              help="Use this new secret (a whsk_ key for an ed25519 endpoint) instead of"
                   " generating one.")
@click.option("--force", is_flag=True,
              help="Rotate even though the previous rotation's grace is still running.")
@pass_ctx
def rotate_secret(ctx: Context, endpoint_id: str, grace: dt.timedelta, secret: str | None,
                  force: bool) -> None:
    """Give an endpoint a new signing secret, printed once.

    Until the grace period ends, every request carries two signatures (new and old), so
    the receiver can switch to the new secret whenever it likes; after it, only the new
    secret signs. Give the receiver the new secret within the grace period.

    An ed25519 endpoint gets a new key pair: its new public key is printed (the secret
    key never is), and the old key signs beside it (two v1a entries) for the grace.

    \b
    Example:
      outbox endpoints rotate-secret 0193... --grace 48h
    """
    with ctx.connect() as conn:
        rotated = ep.rotate_secret(conn, endpoint_id, schema=ctx.schema, grace=grace,
                                   secret=secret, force=force)
    click.echo(f"id:     {rotated.endpoint.id}")
    if rotated.endpoint.public_key:
        click.echo(f"public key: {rotated.endpoint.public_key}")
    elif secret is None:
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
        credentials = ep.url_credentials(conn, endpoint.id, schema=ctx.schema)
        auth = ep.delivery_credentials(conn, endpoint.id, schema=ctx.schema)
        oauth2_secret = client_secret(conn, endpoint.id, schema=ctx.schema,
                                      box=ctx.settings().secret_box())
    result = worker_seam.ping(ctx.overrides, endpoint, secrets, credentials, auth,
                              oauth2_secret)
    if as_json:
        echo_json(result)
    else:
        answer = result.status or ("accepted" if result.ok else "no answer")  # (a broker)
        click.echo(f"{endpoint.url}: {answer} in "
                   f"{result.duration_ms:.0f} ms ({result.verdict})")
        click.echo(f"webhook-id: {result.webhook_id}")
        if result.error:
            click.echo(f"error:      {result.error}")
        click.echo(f"response:   {cut(result.response, 300)}")
    if not result.ok:
        raise Failed(f"ping to {endpoint.url} failed: {result.error}")
