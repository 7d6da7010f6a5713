"""``outbox secrets``: encryption of signing secrets at rest (``OUTBOX_SECRET_KEY``)."""

from __future__ import annotations

import click

from outbox import queries
from outbox.cli import Context, cli, pass_ctx
from outbox.db import render, translated
from outbox.secretbox import generate_key


@cli.group()
def secrets() -> None:
    """Encrypt endpoint signing secrets at rest and rotate the encryption key.

    \b
    Turn encryption on, then encrypt what is stored:
      export OUTBOX_SECRET_KEY=$(outbox secrets generate-key)
      outbox secrets reencrypt
    \b
    Rotate the key (the first key encrypts, every key decrypts):
      export OUTBOX_SECRET_KEY=$(outbox secrets generate-key),$OUTBOX_SECRET_KEY
      outbox secrets reencrypt          # then drop the old key from the list
    """


@secrets.command("generate-key")
def generate_key_cmd() -> None:
    """Print a new random Fernet key for OUTBOX_SECRET_KEY."""
    click.echo(generate_key())


@secrets.command()
@pass_ctx
def reencrypt(ctx: Context) -> None:
    """Re-seal every stored secret with the first key of OUTBOX_SECRET_KEY.

    One transaction: all endpoints or none. Plain (never encrypted) secrets get
    encrypted; with OUTBOX_SECRET_KEY empty, encrypted ones are refused (no silent
    decryption to plain text).
    """
    box = ctx.settings().secret_box()
    if not box.encrypting:
        raise click.UsageError("OUTBOX_SECRET_KEY is empty: nothing to encrypt with")
    schema = ctx.schema
    with ctx.connect() as conn, translated(), conn.transaction():
        rows = conn.execute(render(queries.ENDPOINT_SECRETS_FOR_UPDATE, schema)).fetchall()
        update = render(queries.ENDPOINT_SET_SECRETS, schema)
        for endpoint_id, secret, previous in rows:
            conn.execute(update, (box.reseal(str(secret)),
                                  box.reseal(str(previous)) if previous else None, endpoint_id))
    click.echo(f"re-encrypted the secrets of {len(rows)} endpoints")
