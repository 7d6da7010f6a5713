"""Ed25519 endpoints (``--signature ed25519``): the key pair, its sealing, rotation with
overlap, re-encryption, the CLI, and refusals that write nothing."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from typing import Any

import psycopg
import pytest

from outbox._security.secretbox import PREFIX, SecretBox, generate_key
from outbox.admin import endpoints as ep
from outbox.admin.secrets import reencrypt
from outbox.delivery.ping import ping
from outbox.errors import InvalidEndpoint, OperationRefused
from outbox.signing import generate_key_pair, public_key_of, signature_header
from outbox.testing.receiver import Receiver
from tests.support import rfc8032
from tests.support.cli import execute, invoke
from tests.support.pg import SCHEMA, count
from tests.support.workers import SECRET, settings

URL = "https://example.com/hooks"


def _stored(db_url: str) -> list[tuple[Any, ...]]:
    return execute(db_url, f"SELECT secret, previous_secret, signature, public_key"
                           f" FROM {SCHEMA}.endpoints")


def _v1a_valid(public_key: str, secrets: list[str]) -> list[bool]:
    """Each v1a entry the secrets sign, checked by the RFC 8032 reference code."""
    header = signature_header(secrets, "msg_1", 1_700_000_000, b"{}")
    raw = base64.b64decode(public_key.removeprefix("whpk_"))
    return [rfc8032.verify(raw, b"msg_1.1700000000.{}", base64.b64decode(e[4:]))
            for e in header.split(" ")]


def test_add_seals_the_secret_key_and_shows_only_the_public_key(db_url: str) -> None:
    box = SecretBox(generate_key())
    with psycopg.connect(db_url, autocommit=True) as c:
        created = ep.add(c, URL, schema=SCHEMA, signature="ed25519", box=box)
        opened = ep.signing_secrets(c, created.endpoint.id, schema=SCHEMA, box=box)
    e = created.endpoint
    assert created.secret is None  # the secret key is never returned
    assert (e.signature, e.previous_public_key) == ("ed25519", None)
    assert e.public_key is not None and len(base64.b64decode(e.public_key[5:])) == 32
    ((stored, previous, signature, public),) = _stored(db_url)
    assert stored.startswith(PREFIX) and "whsk_" not in stored and previous is None
    assert (signature, public) == ("ed25519", e.public_key)
    assert len(opened) == 1 and opened[0].startswith("whsk_")
    assert public_key_of(opened[0]) == e.public_key
    assert _v1a_valid(e.public_key, opened) == [True]
    assert ep.public_keys(e) == [ep.PublicKey(e.public_key, None)]


def test_a_given_secret_key_is_used_and_hmac_stays_the_default(db_url: str) -> None:
    secret, public = generate_key_pair()
    with psycopg.connect(db_url, autocommit=True) as c:
        given = ep.add(c, URL, schema=SCHEMA, signature="ed25519", secret=secret).endpoint
        hmac = ep.add(c, URL, schema=SCHEMA)
    assert given.public_key == public
    assert (hmac.endpoint.signature, hmac.endpoint.public_key) == ("hmac", None)
    assert hmac.secret is not None and hmac.secret.startswith("whsec_")
    assert ep.public_keys(hmac.endpoint) == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"signature": "rsa"}, "signature must be one of hmac, ed25519, not 'rsa'"),
    ({"signature": "ED25519"}, "signature must be one of"),
    ({"signature": "ed25519", "secret": SECRET}, "secret is a whsk_ Ed25519 secret key"),
    ({"secret": generate_key_pair()[0]}, "needs signature ed25519"),
    ({"signature": "ed25519", "secret": "whsk_" + base64.b64encode(b"k" * 31).decode()},
     "32 bytes, got 31"),
    ({"signature": "ed25519", "secret": "whsk_#"}, "not valid standard base64"),
])
def test_bad_input_is_refused_and_writes_nothing(db_url: str, kwargs: dict[str, Any],
                                                 message: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c, \
            pytest.raises(InvalidEndpoint, match=message) as caught:
        ep.add(c, URL, schema=SCHEMA, **kwargs)
    secret = kwargs.get("secret")
    assert not secret or secret[5:] not in str(caught.value)
    assert count(db_url, "endpoints") == 0


def test_the_database_refuses_an_unknown_scheme_or_a_missing_key(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        eid = ep.add(c, URL, schema=SCHEMA).endpoint.id
    for change in ("signature = 'rsa'", "signature = 'ed25519'", "public_key = 'whpk_x'"):
        with pytest.raises(psycopg.errors.CheckViolation):
            execute(db_url, f"UPDATE {SCHEMA}.endpoints SET {change} WHERE id = %s", (eid,))


def test_rotation_keeps_the_previous_key_signing_for_the_grace(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        first = ep.add(c, URL, schema=SCHEMA, signature="ed25519").endpoint
        rotated = ep.rotate_secret(c, first.id, schema=SCHEMA, grace=dt.timedelta(hours=1))
        signing = ep.signing_secrets(c, first.id, schema=SCHEMA)
        with pytest.raises(OperationRefused, match="still in a rotation"):
            ep.rotate_secret(c, first.id, schema=SCHEMA, grace=dt.timedelta(hours=1))
        with pytest.raises(InvalidEndpoint, match="whsk_ Ed25519 secret key"):
            ep.rotate_secret(c, first.id, schema=SCHEMA, grace=dt.timedelta(0), secret=SECRET,
                             force=True)
        unchanged = ep.get(c, first.id, schema=SCHEMA)
        ended = ep.rotate_secret(c, first.id, schema=SCHEMA, grace=dt.timedelta(0), force=True)
    e = rotated.endpoint
    assert rotated.secret is None
    assert e.public_key not in (None, first.public_key)
    assert e.previous_public_key == first.public_key
    assert ep.public_keys(e) == [ep.PublicKey(str(e.public_key), None), ep.PublicKey(
        str(first.public_key), e.previous_secret_expires_at)]
    assert unchanged == e
    # two v1a entries: the new key's first, the old key's second
    assert _v1a_valid(str(e.public_key), signing) == [True, False]
    assert _v1a_valid(str(first.public_key), signing) == [False, True]
    # grace over (0 s): only the newest key is served and signs
    assert ended.endpoint.previous_public_key is None
    assert [k.key for k in ep.public_keys(ended.endpoint)] == [ended.endpoint.public_key]


def test_hmac_rotation_refuses_a_secret_key(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        eid = ep.add(c, URL, schema=SCHEMA, secret=SECRET).endpoint.id
        with pytest.raises(InvalidEndpoint, match="needs signature ed25519"):
            ep.rotate_secret(c, eid, schema=SCHEMA, grace=dt.timedelta(0),
                             secret=generate_key_pair()[0])
        assert ep.signing_secrets(c, eid, schema=SCHEMA) == [SECRET]
        rotated = ep.rotate_secret(c, eid, schema=SCHEMA, grace=dt.timedelta(hours=1))
    assert rotated.secret is not None and rotated.secret.startswith("whsec_")
    assert rotated.endpoint.public_key is None and rotated.endpoint.previous_public_key is None


def test_reencrypt_reseals_current_and_previous_secret_keys(conn: psycopg.Connection[Any]
                                                            ) -> None:
    old_key = generate_key()
    old = SecretBox(old_key)
    first = ep.add(conn, URL, schema=SCHEMA, signature="ed25519", box=old).endpoint
    rotated = ep.rotate_secret(conn, first.id, schema=SCHEMA, grace=dt.timedelta(hours=1),
                               box=old).endpoint
    before = ep.signing_secrets(conn, first.id, schema=SCHEMA, box=old)
    new_key = generate_key()
    assert reencrypt(conn, schema=SCHEMA, box=SecretBox(f"{new_key},{old_key}")) == 1
    row = conn.execute(f"SELECT secret, previous_secret FROM {SCHEMA}.endpoints".encode()
                       ).fetchone()
    assert row is not None
    new = SecretBox(new_key)  # the old key is no longer needed
    assert [new.open(row[0]), new.open(row[1])] == before
    after = ep.signing_secrets(conn, first.id, schema=SCHEMA, box=new)
    assert _v1a_valid(str(rotated.public_key), after) == [True, False]
    assert _v1a_valid(str(first.public_key), after) == [False, True]


def test_cli_add_show_rotate_print_public_keys_never_the_secret_key(db_url: str) -> None:
    added = invoke(db_url, "endpoints", "add", URL, "--signature", "ed25519")
    assert added.exit_code == 0, added.output
    lines = dict(line.split(": ", 1) for line in added.stdout.splitlines() if ": " in line)
    eid, public = lines["id"].strip(), lines["public key"].strip()
    assert public.startswith("whpk_") and "secret:" not in added.output
    shown = invoke(db_url, "endpoints", "show", eid)
    assert "signature:    ed25519" in shown.output and public in shown.output
    rotated = invoke(db_url, "endpoints", "rotate-secret", eid, "--grace", "1h")
    assert rotated.exit_code == 0, rotated.output
    new_public = dict(line.split(": ", 1) for line in rotated.stdout.splitlines()
                      if ": " in line)["public key"].strip()
    assert new_public.startswith("whpk_") and new_public != public
    shown = invoke(db_url, "endpoints", "show", eid)
    assert new_public in shown.output and f"{public} (previous, signs until" in shown.output
    listed = invoke(db_url, "endpoints", "list", "--json")
    with psycopg.connect(db_url, autocommit=True) as c:
        keys = ep.signing_secrets(c, eid, schema=SCHEMA)
    for text in (added.output, shown.output, rotated.output, listed.output):
        assert "whsk_" not in text and not any(k[5:] in text for k in keys)


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--signature", "rsa"], 2, "Invalid value for '--signature'"),
    (["--signature", ""], 2, "Invalid value for '--signature'"),
    (["--signature", "ed25519", "--secret", SECRET], 1, "whsk_ Ed25519 secret key"),
    (["--secret", "whsk_" + base64.b64encode(b"k" * 32).decode()], 1, "needs signature ed25519"),
])
def test_cli_bad_signature_input_writes_nothing(db_url: str, args: list[str], code: int,
                                                message: str) -> None:
    done = invoke(db_url, "endpoints", "add", URL, *args)
    assert done.exit_code == code, done.output
    assert message in done.output
    assert count(db_url, "endpoints") == 0


def test_ping_signs_v1a_like_a_delivery(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        endpoint = ep.add(c, "http://127.0.0.1:9/later", schema=SCHEMA, signature="ed25519",
                          box=SecretBox()).endpoint
    assert endpoint.public_key is not None
    with Receiver(secret=endpoint.public_key) as rx:
        with psycopg.connect(db_url, autocommit=True) as c:
            endpoint = ep.update(c, endpoint.id, schema=SCHEMA, url=rx.url + "/hook").endpoint
            secrets = ep.signing_secrets(c, endpoint.id, schema=SCHEMA, box=SecretBox())
        assert asyncio.run(ping(settings(db_url), endpoint, secrets)).ok
        assert rx.wait_for(1, 5)
    (got,) = rx.received
    assert got.signature_ok is True and got.headers["webhook-signature"].startswith("v1a,")
