"""``outbox endpoints``: register, list, enable and disable webhook endpoints."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from outbox.admin import endpoints as ep
from outbox.admin.endpoint_options import SIGNATURES
from outbox.cli.filter_params import filter_option, read_json_arg
from outbox.cli.output import print_table
from outbox.cli.params import (
    credential_options,
    delivery_options,
    endpoint_credentials,
    endpoint_options,
    oauth2_flags,
    oauth2_of,
    rate_options,
    tenant_option,
)
from outbox.cli.root import Context, cli, pass_ctx


def parse_headers(values: tuple[str, ...], hint: str = "--header") -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            shown = repr(item) if hint == "--header" else "a value (not shown)"  # secret
            raise click.BadParameter(f"{shown} is not K=V", param_hint=hint)
        headers[name.strip()] = value
    return headers


def endpoint_json(endpoint: ep.Endpoint) -> dict[str, Any]:
    data = dataclasses.asdict(endpoint)
    for key, value in data.items():
        if hasattr(value, "isoformat"):
            data[key] = value.isoformat()
    data["id"] = str(endpoint.id)
    return data


def print_warnings(warnings: tuple[str, ...]) -> None:
    """Registration warnings (e.g. the host does not resolve yet) on stderr."""
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


@cli.group()
def endpoints() -> None:
    """Register and manage the endpoints that receive webhooks.

    \b
    Examples:
      outbox endpoints add https://example.com/hooks --tenant acme --event-type 'invoice.*'
      outbox endpoints list --tenant acme --json
      outbox endpoints disable 0193...  --reason "customer asked"
      outbox endpoints rotate-secret 0193... --grace 24h
      outbox endpoints ping 0193...
    """


@endpoints.command("add")
@click.argument("url")
@click.option("--event-type", "event_types", multiple=True, metavar="TYPE",
              help="Deliver only this event type, or 'prefix.*' (repeatable). Default: '*'.")
@tenant_option("Receive only this tenant's events (default: tenant-less events only).")
@click.option("--all-tenants", is_flag=True,
              help="Receive every tenant's events (an internal consumer; never a default).")
@click.option("--secret", default=None, metavar="whsec_...",
              help="Signing secret (whsec_ + base64 of 24-64 bytes; with --signature ed25519:"
                   " a whsk_ secret key). Default: generated.")
@click.option("--signature", type=click.Choice(SIGNATURES), default="hmac", show_default=True,
              help="hmac: v1 signatures with a shared secret; ed25519: v1a signatures with a"
                   " key pair, the receiver verifies with the printed whpk_ public key.")
@click.option("--header", "headers", multiple=True, metavar="K=V",
              help="Extra HTTP header sent with every delivery (repeatable).")
@click.option("--description", default="", help="Free text shown in listings.")
@click.option("--ordered", is_flag=True,
              help="Deliver events that share a key one at a time, in emit order, each "
                   "after the previous one is delivered (docs: guides/ordering.md).")
@credential_options(update=False)
@delivery_options
@rate_options
@oauth2_flags
@filter_option(update=False)
@pass_ctx
def add(ctx: Context, /, url: str, event_types: tuple[str, ...], tenant: str | None,
        all_tenants: bool, secret: str | None, signature: str,
        headers: tuple[str, ...], description: str, ordered: bool, rate_limit: float | None,
        rate_burst: int | None, payload_filter: str | None, **options: Any) -> None:
    """Register URL; print its id and, if generated, its secret (shown only once).

    The URL's host is resolved now and refused if any of its addresses is loopback,
    private, link-local or otherwise not public, unless it lies in $OUTBOX_ALLOW_NETWORKS
    (e.g. 127.0.0.0/8 for a local receiver). A host that does not resolve yet is only a
    warning: the worker checks the address again before every delivery.

    An endpoint with --tenant receives only that tenant's events; one without receives
    only tenant-less events; --all-tenants receives every event.

    With --ordered, deliveries of events that share a key go out one at a time, in emit
    order; a dead one holds its key back until `outbox replay` or `outbox dead skip`.

    URL may also be a message broker: amqp(s)://user:pass@host/vhost?exchange=X
    (RabbitMQ), nats://host?subject=S (JetStream), redis(s)://host/0?stream=S&maxlen=N.
    Credentials in it are stored sealed and never shown again.

    --secret-header, --basic-auth, --bearer-token and --tls-client-cert/--tls-client-key
    are stored sealed and never shown again: `show` lists the secret headers by name and
    the auth kind (docs: Endpoint auth).

    With --signature ed25519 deliveries carry v1a (Ed25519) signatures instead of v1
    (HMAC): the key pair is generated, its secret key stored sealed and never shown, and
    the whpk_ public key printed (and shown by `show`, served by the API: docs: Signatures).

    With --rate-limit N, every worker together sends at most N requests a second (and B
    at once above that, --burst). Without it, workers still slow down by themselves when
    the endpoint answers 429 or 503 or times out (docs: Flow control).

    With --oauth2-token-url, --oauth2-client-id and --oauth2-client-secret (all three),
    each delivery carries "Authorization: Bearer TOKEN", a client-credentials token the
    worker fetches from that URL and reuses until shortly before it expires (docs:
    Endpoints, OAuth2). The client secret is stored sealed and never shown again.

    \b
    Examples:
      outbox endpoints add https://example.com/hooks --event-type invoice.paid \\
          --header "X-Team=billing"
      outbox endpoints add https://acme.example/hooks --tenant acme --event-type 'invoice.*'
      outbox endpoints add 'amqp://app:secret@mq.internal/shop?exchange=orders'
      outbox endpoints add https://api.example.com/hooks --secret-header "X-Api-Key=$KEY"
      outbox endpoints add https://gw.example.com/hooks --tls-client-cert client.pem \\
          --tls-client-key client.key
      outbox endpoints add https://api.example/hooks \\
          --oauth2-token-url https://login.example/oauth2/token \\
          --oauth2-client-id outbox --oauth2-client-secret "$SECRET" --oauth2-scope hooks
      outbox endpoints add https://example.com/big --event-type invoice.paid \\
          --filter '{"amount": {"$gte": 1000}, "currency": {"$in": ["EUR", "USD"]}}'
    """
    parsed = parse_headers(headers)
    credentials = endpoint_credentials(options, parse_headers)
    oauth2 = oauth2_of(options)
    with ctx.connect() as conn:
        created = ep.add(
            conn, url, schema=ctx.schema, event_types=event_types or None, tenant=tenant,
            all_tenants=all_tenants, secret=secret,
            headers=parsed, description=description, options=endpoint_options(options),
            ordered=ordered, rate_limit=rate_limit, rate_burst=rate_burst,
            allow_networks=ctx.allow_networks(), credentials=credentials, oauth2=oauth2,
            signature=signature, filter=read_json_arg(payload_filter, "--filter"),
        )
    print_warnings(created.warnings)
    click.echo(f"id:     {created.endpoint.id}")
    if created.endpoint.public_key:
        click.echo(f"public key: {created.endpoint.public_key}")
        click.echo("(verify v1a signatures with it; the secret key is never shown)", err=True)
    if created.secret:
        click.echo(f"secret: {created.secret}")
        click.echo("(the secret is shown only now: store it with the receiver)", err=True)


def tenant_label(endpoint: ep.Endpoint) -> str:
    """``(all)`` for an all-tenants endpoint, ``-`` for a tenant-less one."""
    return "(all)" if endpoint.all_tenants else endpoint.tenant or "-"


@endpoints.command("list")
@tenant_option("Only this tenant's endpoints.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array, for scripts.")
@pass_ctx
def list_(ctx: Context, tenant: str | None, as_json: bool) -> None:
    """List endpoints (secrets are never shown). The tenant column shows (all) for an
    endpoint that receives every tenant's events and - for a tenant-less one."""
    with ctx.connect() as conn:
        rows = ep.list_all(conn, schema=ctx.schema, tenant=tenant)
    if as_json:
        click.echo(json.dumps([endpoint_json(r) for r in rows], indent=2))
        return
    table = [
        [str(r.id), tenant_label(r), r.url, ",".join(r.event_types) if r.event_types else "*",
         "yes" if r.enabled else f"no ({r.disabled_reason})",
         r.created_at.strftime("%Y-%m-%d %H:%M")]
        for r in rows
    ]
    print_table(["id", "tenant", "url", "event types", "enabled", "created"], table)


@endpoints.command("disable")
@click.argument("endpoint_id", metavar="ID")
@click.option("--reason", default="manual", help="Recorded with the endpoint.")
@pass_ctx
def disable(ctx: Context, endpoint_id: str, reason: str) -> None:
    """Stop delivering to an endpoint; pending deliveries wait until it is enabled."""
    with ctx.connect() as conn:
        e = ep.set_enabled(conn, endpoint_id, False, schema=ctx.schema, reason=reason)
    click.echo(f"disabled {e.id} ({e.url})")


@endpoints.command("enable")
@click.argument("endpoint_id", metavar="ID")
@pass_ctx
def enable(ctx: Context, endpoint_id: str) -> None:
    """Resume delivering to an endpoint."""
    with ctx.connect() as conn:
        e = ep.set_enabled(conn, endpoint_id, True, schema=ctx.schema)
    click.echo(f"enabled {e.id} ({e.url})")
