"""OUTBOX_SECRET_KEY: secrets are stored encrypted, deliveries still verify, keys rotate."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import outbox
from outbox.cli import cli, load_commands
from outbox.receiver import Receiver
from outbox.secretbox import PREFIX, SecretBox, generate_key
from tests.pg import SCHEMA
from tests.workers import SECRET, add_endpoint, drain, emit, rows, settings


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
