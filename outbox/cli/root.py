"""The root of the ``outbox`` command line: the group, its global options, the context
every command receives, and how an OutboxError leaves a command.

Every command exits 0 on success, 1 with a one-line ``error: ...`` on an
:class:`~outbox.errors.OutboxError`, and 2 on a usage error (click's convention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
import psycopg
from pydantic import ValidationError

from outbox._db.connection import connect
from outbox._security.ssrf import IPNetwork, parse_networks
from outbox.errors import OutboxError
from outbox.settings import Settings, invalid_settings


@dataclass
class Context:
    """Settings resolved from the environment and the global options."""

    overrides: dict[str, Any]

    def settings(self) -> Settings:
        try:
            return Settings(**self.overrides)
        except ValidationError as exc:
            raise invalid_settings(exc, "setting") from None

    @property
    def schema(self) -> str:
        return self.settings().schema_name

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection: each CLI change commits on its own."""
        return connect(self.settings(), autocommit=True)

    def allow_networks(self) -> tuple[IPNetwork, ...]:
        """``OUTBOX_ALLOW_NETWORKS``: what the registration-time SSRF check lets through."""
        return parse_networks(self.settings().allow_networks)


pass_ctx = click.make_pass_decorator(Context)


class Failed(click.ClickException):
    """An :class:`OutboxError` as click sees it: ``error: ...`` on stderr, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True, file=file)


class _Group(click.Group):
    """The root group: OutboxErrors leave every command as :class:`Failed`, so the console
    entry point and click's test runner report them the same way."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OutboxError as exc:
            raise Failed(str(exc)) from exc


@click.group(cls=_Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--database-url", envvar=None, default=None, metavar="URL",
              help="PostgreSQL URL (default: $OUTBOX_DATABASE_URL, $DATABASE_URL, local server).")
@click.option("--schema", default=None, metavar="NAME",
              help="Schema holding the outbox tables (default: $OUTBOX_SCHEMA or 'outbox').")
@click.version_option(package_name="outbox")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, schema: str | None) -> None:
    """Transactional outbox and signed webhook delivery on PostgreSQL.

    \b
    Typical first run:
      outbox migrate
      outbox endpoints add https://example.com/hooks --event-type invoice.paid
      outbox worker

    \b
    Operations:
      outbox stats --watch               # backlog per endpoint
      outbox dead list --since 1h        # what died, and why
      outbox replay --endpoint ID --dry-run
      outbox prune --older-than 7d
    """
    overrides: dict[str, Any] = {}
    if database_url:
        overrides["database_url"] = database_url
    if schema:
        overrides["schema_name"] = schema
    ctx.obj = Context(overrides)
