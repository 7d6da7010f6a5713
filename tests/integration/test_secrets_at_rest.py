"""OUTBOX_SECRET_KEY: secrets are stored encrypted, deliveries still verify, keys rotate."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import outbox
from outbox._security.secretbox import PREFIX, SecretBox, generate_key
from outbox.admin import endpoints as ep
from outbox.admin.secrets import reencrypt
from outbox.cli import cli, load_commands
from outbox.testing.receiver import Receiver
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, drain, emit, rows, settings


def _cli(db_url: str, key: str, *args: str) -> tuple[int, str]:
    load_commands()
    result = CliRunner().invoke(
        cli, ["--database-url", db_url, "--schema", SCHEMA, *args],
        env={"OUTBOX_SECRET_KEY": key})
    return result.exit_code, result.output


def test_encrypted_at_rest_and_delivered(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key = generate_key()
    monkeypatch.setenv("OUTBOX_SECRET_KEY", key)
    outbox.get_settings.cache_clear()
    try:
        with Receiver(secret=SECRET) as rx:
            add_endpoint(db_url, rx.url + "/x", secret=SECRET)
            ((stored,),) = rows(db_url, "SELECT secret FROM outbox.endpoints")
            assert stored.startswith(PREFIX) and SECRET not in stored and SECRET[6:] not in stored
            emit(db_url, 2)
            drain(settings(db_url, secret_key=key))
            assert rx.wait_for(2, 5)
        assert all(r.signature_ok for r in rx.received)
        with pytest.raises(outbox.ConfigurationError, match="OUTBOX_SECRET_KEY"):
            SecretBox("").open(stored)
        with pytest.raises(outbox.ConfigurationError, match="does not open"):
            SecretBox(generate_key()).open(stored)
    finally:
        outbox.get_settings.cache_clear()


def test_key_rotation_with_reencrypt(db_url: str) -> None:
    add_endpoint(db_url, "https://example.com/a", secret=SECRET)  # stored plain (no key)
    old, new = generate_key(), generate_key()
    assert _cli(db_url, old, "secrets", "reencrypt")[0] == 0
    ((sealed_old,),) = rows(db_url, "SELECT secret FROM outbox.endpoints")
    assert SecretBox(old).open(sealed_old) == SECRET
    code, out = _cli(db_url, f"{new},{old}", "secrets", "reencrypt")
    assert code == 0 and "1 endpoints" in out
    ((sealed_new,),) = rows(db_url, "SELECT secret FROM outbox.endpoints")
    assert SecretBox(new).open(sealed_new) == SECRET  # the old key is no longer needed
    with pytest.raises(outbox.ConfigurationError):
        SecretBox(old).open(sealed_new)


def test_bad_key_is_a_clear_error(db_url: str) -> None:
    code, out = _cli(db_url, "not-a-fernet-key", "secrets", "reencrypt")
    assert code == 1 and "OUTBOX_SECRET_KEY must be comma-separated Fernet keys" in out
    code, out = _cli(db_url, "", "secrets", "reencrypt")
    assert code == 2 and "OUTBOX_SECRET_KEY is empty" in out


# --- the library function behind `outbox secrets reencrypt` --------------------------

def _stored(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        f"SELECT id, secret, previous_secret FROM {SCHEMA}.endpoints ORDER BY id").fetchall()


def test_reencrypt_seals_current_and_previous_secrets(conn: psycopg.Connection[Any]) -> None:
    first = ep.add(conn, "https://example.com/a", schema=SCHEMA, secret=SECRET,
                   box=SecretBox()).endpoint
    ep.add(conn, "https://example.com/b", schema=SCHEMA, box=SecretBox())
    rotated = ep.rotate_secret(conn, first.id, schema=SCHEMA, grace=dt.timedelta(hours=1),
                               box=SecretBox())
    key = generate_key()
    assert reencrypt(conn, schema=SCHEMA, box=SecretBox(key)) == 2
    stored = _stored(conn)
    assert all(s.startswith(PREFIX) for _, s, _ in stored)
    (_, secret, previous), _ = stored if stored[0][0] == first.id else stored[::-1]
    assert previous.startswith(PREFIX)
    box = SecretBox(key)
    assert (box.open(secret), box.open(previous)) == (rotated.secret, SECRET)
    assert ep.signing_secrets(conn, first.id, schema=SCHEMA, box=box) == [rotated.secret,
                                                                          SECRET]


def test_reencrypt_without_a_key_is_refused(conn: psycopg.Connection[Any]) -> None:
    ep.add(conn, "https://example.com/a", schema=SCHEMA, secret=SECRET, box=SecretBox())
    before = _stored(conn)
    with pytest.raises(outbox.ConfigurationError, match="OUTBOX_SECRET_KEY is empty"):
        reencrypt(conn, schema=SCHEMA, box=SecretBox(""))
    assert _stored(conn) == before


def test_reencrypt_is_all_or_nothing(conn: psycopg.Connection[Any]) -> None:
    old, other = generate_key(), generate_key()
    ep.add(conn, "https://example.com/a", schema=SCHEMA, secret=SECRET, box=SecretBox())
    ep.add(conn, "https://example.com/b", schema=SCHEMA, secret=SECRET, box=SecretBox(old))
    before = _stored(conn)
    with pytest.raises(outbox.ConfigurationError, match="does not open"):
        reencrypt(conn, schema=SCHEMA, box=SecretBox(other))  # opens neither sealed one
    assert _stored(conn) == before
