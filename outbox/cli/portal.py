"""``outbox portal-link``: a signed, expiring link to one tenant's customer portal."""

from __future__ import annotations

import datetime as dt
import json

import click

from outbox._emit.event import check_tenant
from outbox.admin import portal
from outbox.cli.params import Duration
from outbox.cli.root import Context, cli, pass_ctx


@cli.command("portal-link")
@click.option("--tenant", required=True, metavar="ID", help="The tenant the portal shows.")
@click.option("--expires", type=Duration(minimum=dt.timedelta(minutes=1)), default="1h",
              show_default=True, metavar="DURATION",
              help="How long the link opens the portal (at most 30d).")
@click.option("--base-url", default=portal.DEFAULT_BASE_URL, show_default=True,
              metavar="URL", help="Where `outbox serve` is reached by the customer.")
@click.option("--json", "as_json", is_flag=True, help="Print url, tenant and expiry as JSON.")
@pass_ctx
def portal_link(ctx: Context, tenant: str, expires: dt.timedelta, base_url: str,
                as_json: bool) -> None:
    """Print a link that opens TENANT's portal: its endpoints (add, edit, disable, rotate
    the secret), its delivery log and replays, nothing else.

    Signed with $OUTBOX_WEB_SECRET (or $OUTBOX_ADMIN_TOKEN): the server must have the
    same one. Nothing is written; a link cannot be revoked before it expires, except by
    changing that secret (which also ends every session).

    \b
    Example:
      outbox portal-link --tenant acme --expires 30m --base-url https://hooks.example.com
    """
    check_tenant(tenant)
    try:
        link = portal.mint_link(tenant, settings=ctx.settings(), expires=expires,
                                base_url=base_url)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"url": link.url, "tenant": link.tenant,
                               "expires_at": link.expires_at.isoformat()}))
        return
    click.echo(link.url)
    click.echo(f"(opens the portal of {tenant} until "
               f"{link.expires_at:%Y-%m-%d %H:%M:%SZ})", err=True)
