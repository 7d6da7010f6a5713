"""``outbox secrets``: encryption of signing secrets at rest (``OUTBOX_SECRET_KEY``)."""

from __future__ import annotations

import click

from outbox._security.secretbox import generate_key
from outbox.admin.secrets import reencrypt as reencrypt_all
from outbox.cli.root import Context, cli, pass_ctx


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
    with ctx.connect() as conn:
        count = reencrypt_all(conn, schema=ctx.schema, box=box)
    click.echo(f"re-encrypted the secrets of {count} endpoints")
