"""``outbox serve``: the HTTP API, the console and the portal (uvicorn)."""

from __future__ import annotations

import importlib
import ipaddress
import secrets
from typing import Any

import click
from pydantic import SecretStr

from outbox.admin.portal import check_secrets, web_settings
from outbox.cli.root import Context, cli, pass_ctx
from outbox.errors import ConfigurationError

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """``host`` names or is a loopback address only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _load(module: str) -> Any:
    """The web interface (or uvicorn), loaded by name when the command runs: the CLI and
    the web package are independent interfaces, and only this command needs the ``web``
    extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"outbox serve needs the 'web' extra (missing {exc.name}): "
            "pip install 'outbox[web]'") from None


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Other than loopback only with $OUTBOX_ADMIN_TOKEN "
              "(and $OUTBOX_WEB_SECRET, if set) of 32 characters or more.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@pass_ctx
def serve(ctx: Context, host: str, port: int, log_level: str) -> None:
    """Serve the HTTP API (/api, OpenAPI at /api/openapi.json), the console (/) and the
    customer portal (/portal).

    Operators sign in with $OUTBOX_ADMIN_TOKEN (as a Bearer token, or at /login). Without
    it, serve listens on loopback only and prints a one-off token for this run. Put a TLS
    proxy in front for anything but loopback: the session cookies are Secure.

    \b
    Examples:
      outbox serve
      OUTBOX_ADMIN_TOKEN=$(openssl rand -hex 32) outbox serve --host 0.0.0.0 --port 8080
    """
    settings = web_settings(ctx.settings())
    if not is_loopback(host):
        check_secrets(settings)
    if not settings.admin_token.get_secret_value():
        if not is_loopback(host):
            raise ConfigurationError(
                f"refusing to listen on {host} without OUTBOX_ADMIN_TOKEN: set it (a long "
                "random string), or listen on 127.0.0.1")
        token = secrets.token_urlsafe(32)
        settings = settings.model_copy(update={"admin_token": SecretStr(token)})
        click.echo(f"no OUTBOX_ADMIN_TOKEN: sign in with this one-off token: {token}",
                   err=True)
        if not settings.web_secret.get_secret_value():
            click.echo("(portal links and sessions are signed with it: they end when this "
                       "server stops; set OUTBOX_WEB_SECRET to keep them)", err=True)
    app = _load("outbox.web").create_app(settings)
    log_config = _load("outbox.web.redact").uvicorn_log_config(
        _load("uvicorn.config").LOGGING_CONFIG)
    _load("uvicorn").run(app, host=host, port=port, log_level=log_level, log_config=log_config,
                         proxy_headers=True, server_header=False)
