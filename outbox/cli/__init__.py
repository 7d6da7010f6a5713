"""The ``outbox`` command line: migrations, endpoints, the worker and the demo.

Every command exits 0 on success, 1 with a one-line ``error: ...`` on an
:class:`~outbox.errors.OutboxError`, and 2 on a usage error (click's convention).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import click
import psycopg
from pydantic import ValidationError

from outbox.db import connect
from outbox.errors import ConfigurationError, OutboxError
from outbox.settings import Settings


@dataclass
class Context:
    """Settings resolved from the environment and the global options."""

    overrides: dict[str, Any]

    def settings(self) -> Settings:
        try:
            return Settings(**self.overrides)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ConfigurationError(f"invalid setting {where}: {first['msg']}") from None

    @property
    def schema(self) -> str:
        return self.settings().schema_name

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection: each CLI change commits on its own."""
        return connect(self.settings(), autocommit=True)


pass_ctx = click.make_pass_decorator(Context)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    """
    overrides: dict[str, Any] = {}
    if database_url:
        overrides["database_url"] = database_url
    if schema:
        overrides["schema_name"] = schema
    ctx.obj = Context(overrides)


def main() -> None:
    """Console entry point: OutboxErrors become one line on stderr and exit status 1."""
    from outbox.cli import demo, endpoints, migrate, worker  # noqa: F401  (registers commands)

    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except OutboxError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
