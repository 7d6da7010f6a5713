"""The ``outbox`` command line: migrations, endpoints, dead letters, the worker, the web
server and the demo. Each command module parses, calls one library function and prints;
none holds SQL.

Every command exits 0 on success, 1 with a one-line ``error: ...`` on an
:class:`~outbox.errors.OutboxError`, and 2 on a usage error (click's convention).
"""

from __future__ import annotations

import sys

import click

from outbox.cli.root import cli
from outbox.errors import OutboxError

__all__ = ["cli", "load_commands", "main"]


def load_commands() -> None:
    """Import every command module: each registers its commands on :data:`cli`."""
    from outbox.cli import (  # noqa: F401
        capture,
        dead,
        demo,
        endpoint_filters,
        endpoint_ops,
        endpoints,
        inbox,
        migrate,
        partitions,
        portal,
        prune,
        replay,
        secrets,
        serve,
        stats,
        types,
        worker,
    )


def main() -> None:
    """Console entry point: OutboxErrors become one line on stderr and exit status 1."""
    load_commands()
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
