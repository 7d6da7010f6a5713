"""Endpoint credentials (secret headers, basic/bearer auth, a TLS client certificate):
checked with clear errors that never quote a value, stored sealed, shown by name or kind
only, re-sealed by `outbox secrets reencrypt`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox._security.secretbox import PREFIX, SecretBox, generate_key
from outbox.admin import endpoints as ep
from outbox.admin.endpoint_options import CredentialChanges, EndpointCredentials
from outbox.admin.secrets import reencrypt
from outbox.errors import InvalidEndpoint
from tests.support.cli import execute, invoke, snapshot
from tests.support.pg import SCHEMA
from tests.support.tls import CA

URL = "https://hooks.example.com/in"
TOKEN = "tok_9f8e7d6c5b4a"
API_KEY = "key-0123456789abcdef"
BASIC = "svc-outbox:pa55-w0rd-x"
CA_ = CA()
CLIENT = CA_.issue("outbox-client")
OTHER = CA_.issue("someone-else")


def _creds(**values: Any) -> CredentialChanges:
    """Credentials as a caller may pass them, unvalidated (the library is the check)."""
    return CredentialChanges.model_construct(**values)


def _add(db_url: str, url: str = URL, **kwargs: Any) -> ep.Created:
    with psycopg.connect(db_url, autocommit=True) as c:
        return ep.add(c, url, schema=SCHEMA, box=SecretBox(), **kwargs)


def _update(db_url: str, endpoint: Any, **kwargs: Any) -> ep.Updated:
    with psycopg.connect(db_url, autocommit=True) as c:
        return ep.update(c, endpoint, schema=SCHEMA, box=SecretBox(), **kwargs)


# --- refusals: a clear error, nothing written, the value never quoted ------------------

BAD_ADD = [
    ({"secret_headers": {"webhook-id": API_KEY}}, "is set by outbox"),
    ({"secret_headers": {"Host": API_KEY}}, "is set by outbox"),
    ({"secret_headers": {"Content-Length": API_KEY}}, "is set by outbox"),
    ({"secret_headers": {"X Api": API_KEY}}, "is not a valid HTTP token"),
    ({"secret_headers": {"X-Api-Key": API_KEY + "\n"}}, "control character"),
    ({"secret_headers": {"X-Api-Key": API_KEY, "x-api-key": API_KEY}}, "names a header twice"),
    ({"secret_headers": {"Authorization": API_KEY}, "bearer_token": TOKEN},
     "conflicts with the endpoint's bearer auth"),
    ({"basic_auth": "no-colon-" + TOKEN}, "basic_auth must be USER:PASSWORD"),
    ({"basic_auth": ":" + TOKEN}, "basic_auth must be USER:PASSWORD"),
    ({"basic_auth": "u:" + TOKEN + "\x00"}, "without control characters"),
    ({"bearer_token": "tok " + TOKEN}, "bearer_token must be 1-4096 visible ASCII"),
    ({"bearer_token": ""}, "bearer_token must be 1-4096 visible ASCII"),
    ({"bearer_token": TOKEN * 400}, "bearer_token must be 1-4096 visible ASCII"),
    ({"basic_auth": BASIC, "bearer_token": TOKEN}, "give basic_auth or bearer_token, not both"),
    ({"tls_client_cert": CLIENT.cert}, "give tls_client_cert and tls_client_key together"),
    ({"tls_client_key": CLIENT.key}, "give tls_client_cert and tls_client_key together"),
    ({"tls_client_cert": "not a pem", "tls_client_key": CLIENT.key}, "is not a PEM certificate"),
    ({"tls_client_cert": CLIENT.cert, "tls_client_key": "junk"}, "is not a PEM private key"),
    ({"tls_client_cert": CLIENT.cert, "tls_client_key": OTHER.key}, "does not belong to"),
    ({"tls_client_cert": CLIENT.cert, "tls_client_key": CLIENT.key, "clear_auth": True,
      "bearer_token": TOKEN}, "not both"),
]


@pytest.mark.parametrize(("values", "message"), BAD_ADD)
def test_bad_credentials_are_refused_and_nothing_is_written(db_url: str, values: dict[str, Any],
                                                             message: str) -> None:
    before = snapshot(db_url)
    with pytest.raises(InvalidEndpoint, match=message) as refused:
        _add(db_url, credentials=_creds(**values))
    assert snapshot(db_url) == before
    for secret in (TOKEN, API_KEY, BASIC, CLIENT.key, OTHER.key, "pa55-w0rd"):
        assert secret not in str(refused.value)


def test_an_encrypted_or_expired_certificate_is_refused(db_url: str) -> None:
    locked = CA_.issue("locked", password=b"pw")
    expired = CA_.issue("old", days=-1)
    with pytest.raises(InvalidEndpoint, match="tls_client_key is encrypted"):
        _add(db_url, credentials=_creds(tls_client_cert=locked.cert, tls_client_key=locked.key))
    with pytest.raises(InvalidEndpoint, match="tls_client_cert expired at"):
        _add(db_url, credentials=_creds(tls_client_cert=expired.cert,
                                        tls_client_key=expired.key))
    assert execute(db_url, f"SELECT count(*) FROM {SCHEMA}.endpoints") == [(0,)]


def test_a_header_is_either_plain_or_secret(db_url: str) -> None:
    with pytest.raises(InvalidEndpoint, match="'x-api-key' is both a plain header and a secret"):
        _add(db_url, headers={"X-Api-Key": "visible"},
             credentials=_creds(secret_headers={"x-api-key": API_KEY}))
    with pytest.raises(InvalidEndpoint, match="conflicts with the endpoint's basic auth"):
        _add(db_url, headers={"authorization": "x"}, credentials=_creds(basic_auth=BASIC))
    assert execute(db_url, f"SELECT count(*) FROM {SCHEMA}.endpoints") == [(0,)]


def test_auth_needs_http_and_a_certificate_needs_https(db_url: str) -> None:
    with pytest.raises(InvalidEndpoint, match="apply to http"):
        _add(db_url, "redis://cache.example.com/0?stream=s",
             credentials=_creds(bearer_token=TOKEN))
    with pytest.raises(InvalidEndpoint, match="needs an https:// URL"):
        _add(db_url, "http://hooks.example.com/in",
             credentials=_creds(tls_client_cert=CLIENT.cert, tls_client_key=CLIENT.key))
    assert execute(db_url, f"SELECT count(*) FROM {SCHEMA}.endpoints") == [(0,)]


def test_updates_are_checked_against_the_endpoint_as_it_is(db_url: str) -> None:
    made = _add(db_url, headers={"X-Team": "billing"},
                credentials=_creds(bearer_token=TOKEN, secret_headers={"X-Api-Key": API_KEY}))
    eid = made.endpoint.id
    before = snapshot(db_url)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"headers": {"Authorization": "Basic x"}}, "conflicts with the endpoint's bearer"),
        ({"credentials": _creds(secret_headers={"x-team": "s3cr3t-team"})},
         "'x-team' is both a plain header"),
        ({"headers": {"x-api-key": "plain"}}, "'X-Api-Key' is both a plain header"),
        ({"credentials": _creds(secret_headers={"X-API-KEY": API_KEY})}, "would repeat"),
        ({"credentials": _creds(bearer_token=TOKEN, clear_auth=True)}, "not both"),
        ({"credentials": _creds(secret_headers={"Authorization": "x"})}, "bearer auth"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidEndpoint, match=message):
            _update(db_url, eid, **kwargs)
        assert snapshot(db_url) == before
    # what the refusals were about becomes fine once the conflict is gone
    done = _update(db_url, eid, credentials=_creds(clear_auth=True),
                   headers={"Authorization": "Token visible"})
    assert done.endpoint.auth_kind is None and "Authorization" in done.endpoint.headers
    done = _update(db_url, eid, clear_headers=True,
                   credentials=_creds(secret_headers={"X-Team": "now-secret"}))
    assert done.endpoint.headers == {}
    assert done.endpoint.secret_headers == ["X-Api-Key", "X-Team"]


# --- stored sealed, shown by name or kind only ----------------------------------------

def _row(db_url: str) -> tuple[Any, ...]:
    (row,) = execute(db_url, f"SELECT secret_header_values, secret_headers, auth_kind,"
                             f" auth_secret, tls_client_cert, tls_client_key,"
                             f" tls_client_cert_subject FROM {SCHEMA}.endpoints")
    return row


def test_credentials_are_sealed_and_never_read_back(conn: psycopg.Connection[Any]) -> None:
    key = generate_key()
    box = SecretBox(key)
    made = ep.add(conn, URL, schema=SCHEMA, box=box, credentials=EndpointCredentials(
        secret_headers={"X-Api-Key": API_KEY}, basic_auth=BASIC,
        tls_client_cert=CLIENT.cert, tls_client_key=CLIENT.key))
    conn.commit()
    e = made.endpoint
    assert (e.secret_headers, e.auth_kind, e.tls_client_cert_subject) == (
        ["X-Api-Key"], "basic", "CN=outbox-client")
    assert e.tls_client_cert_expires_at is not None
    values, names, kind, secret, cert, key_pem, _ = conn.execute(
        f"SELECT secret_header_values, secret_headers, auth_kind, auth_secret,"
        f" tls_client_cert, tls_client_key, tls_client_cert_subject FROM {SCHEMA}.endpoints"
    ).fetchone()  # type: ignore[misc]
    assert names == ["X-Api-Key"] and kind == "basic"
    sealed = [values["X-Api-Key"], secret, cert, key_pem]
    assert all(s.startswith(PREFIX) for s in sealed)
    stored = json.dumps(conn.execute(f"SELECT to_jsonb(e) FROM {SCHEMA}.endpoints e")
                        .fetchone()[0])  # type: ignore[index]
    for value in (API_KEY, BASIC, "pa55-w0rd-x", CLIENT.key.splitlines()[1]):
        assert value not in stored
    opened = ep.delivery_credentials(conn, e.id, schema=SCHEMA, box=box)
    assert opened == ep.DeliveryCredentials({"X-Api-Key": API_KEY}, "basic", BASIC,
                                            CLIENT.cert, CLIENT.key)


def test_update_replaces_auth_and_certificate_and_merges_secret_headers(db_url: str) -> None:
    eid = _add(db_url, credentials=_creds(basic_auth=BASIC, secret_headers={"X-A": "aaaa1"},
                                          tls_client_cert=CLIENT.cert,
                                          tls_client_key=CLIENT.key)).endpoint.id
    done = _update(db_url, eid, credentials=_creds(bearer_token=TOKEN,
                                                   secret_headers={"X-B": "bbbb2"}))
    assert (done.endpoint.auth_kind, done.endpoint.secret_headers) == ("bearer", ["X-A", "X-B"])
    with psycopg.connect(db_url, autocommit=True) as c:
        opened = ep.delivery_credentials(c, eid, schema=SCHEMA, box=SecretBox())
    assert opened.auth_secret == TOKEN and opened.tls_client_cert == CLIENT.cert
    assert opened.secret_headers == {"X-A": "aaaa1", "X-B": "bbbb2"}
    done = _update(db_url, eid, credentials=_creds(clear_secret_headers=True, clear_auth=True,
                                                   clear_tls_client_cert=True))
    e = done.endpoint
    assert (e.secret_headers, e.auth_kind, e.tls_client_cert_subject) == ([], None, None)
    assert _row(db_url) == ({}, [], None, None, None, None, None)


def test_reencrypt_reseals_every_credential(conn: psycopg.Connection[Any]) -> None:
    old, new = generate_key(), generate_key()
    made = ep.add(conn, URL, schema=SCHEMA, box=SecretBox(old), credentials=EndpointCredentials(
        secret_headers={"X-Api-Key": API_KEY, "X-Other": "other-secret"},
        bearer_token=TOKEN, tls_client_cert=CLIENT.cert, tls_client_key=CLIENT.key))
    before = ep.delivery_credentials(conn, made.endpoint.id, schema=SCHEMA, box=SecretBox(old))
    assert reencrypt(conn, schema=SCHEMA, box=SecretBox(f"{new},{old}")) == 1
    after = ep.delivery_credentials(conn, made.endpoint.id, schema=SCHEMA, box=SecretBox(new))
    assert after == before and after.auth_secret == TOKEN
    values, secret, cert, key = conn.execute(
        f"SELECT secret_header_values, auth_secret, tls_client_cert, tls_client_key"
        f" FROM {SCHEMA}.endpoints").fetchone()  # type: ignore[misc]
    for sealed in (*values.values(), secret, cert, key):
        with pytest.raises(Exception, match="does not open"):
            SecretBox(old).open(sealed)  # the old key no longer opens any of them


# --- the CLI: flags, files, output that never shows a value ---------------------------

def _files(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "client.pem").write_text(CLIENT.cert)
    (tmp_path / "client.key").write_text(CLIENT.key)
    return str(tmp_path / "client.pem"), str(tmp_path / "client.key")


def test_cli_add_show_update_never_print_a_credential(db_url: str, tmp_path: Path) -> None:
    cert, key = _files(tmp_path)
    added = invoke(db_url, "endpoints", "add", URL, "--secret-header", f"X-Api-Key={API_KEY}",
                   "--bearer-token", TOKEN, "--tls-client-cert", cert, "--tls-client-key", key,
                   "--header", "X-Team=billing")
    assert added.exit_code == 0, added.output
    eid = added.stdout.split()[1]
    shown = invoke(db_url, "endpoints", "show", eid)
    assert "headers:      X-Team=billing, X-Api-Key=[redacted]" in shown.stdout
    assert "auth:         bearer; TLS client certificate CN=outbox-client (expires" in shown.stdout
    outputs = [added.output, shown.output,
               invoke(db_url, "endpoints", "show", eid, "--json").output,
               invoke(db_url, "endpoints", "list", "--json").output]
    updated = invoke(db_url, "endpoints", "update", eid, "--basic-auth", BASIC,
                     "--secret-header", "X-Second=second-secret")
    assert updated.exit_code == 0, updated.output
    assert "auth:        basic; TLS client certificate" in updated.stdout
    outputs.append(updated.output)
    listed = json.loads(invoke(db_url, "endpoints", "list", "--json").stdout)[0]
    assert listed["secret_headers"] == ["X-Api-Key", "X-Second"]
    assert listed["auth_kind"] == "basic"
    removed = invoke(db_url, "endpoints", "update", eid, "--no-auth", "--no-tls-client-cert",
                     "--clear-secret-headers")
    assert removed.exit_code == 0 and "  auth:        -" in removed.stdout
    for text in [*outputs, removed.output]:
        for secret in (API_KEY, TOKEN, BASIC, "pa55-w0rd-x", "second-secret",
                       CLIENT.key.splitlines()[1]):
            assert secret not in text


def test_cli_refusals_are_clear_and_quote_no_value(db_url: str, tmp_path: Path) -> None:
    cert, key = _files(tmp_path)
    before = snapshot(db_url)
    bad = invoke(db_url, "endpoints", "add", URL, "--secret-header", f"X-Api-Key{API_KEY}")
    assert bad.exit_code == 2 and "is not K=V" in bad.output and API_KEY not in bad.output
    bad = invoke(db_url, "endpoints", "add", URL, "--tls-client-cert", cert,
                 "--tls-client-key", str(tmp_path / "missing.key"))
    assert bad.exit_code == 2 and "cannot read" in bad.output
    bad = invoke(db_url, "endpoints", "add", URL, "--tls-client-cert", cert)
    assert bad.exit_code == 1 and "give tls_client_cert and tls_client_key" in bad.output
    bad = invoke(db_url, "endpoints", "add", URL, "--bearer-token", "a b" + TOKEN)
    assert bad.exit_code == 1 and "visible ASCII" in bad.output and TOKEN not in bad.output
    bad = invoke(db_url, "endpoints", "add", URL, "--tls-client-cert", key,
                 "--tls-client-key", key)
    assert bad.exit_code == 1 and "not a PEM certificate" in bad.output
    assert CLIENT.key.splitlines()[1] not in bad.output
    assert snapshot(db_url) == before


def test_update_inside_the_callers_transaction_commits_with_it(
        conn: psycopg.Connection[Any]) -> None:
    made = ep.add(conn, URL, schema=SCHEMA, box=SecretBox())
    conn.commit()
    ep.update(conn, made.endpoint.id, schema=SCHEMA, box=SecretBox(),
              credentials=EndpointCredentials(bearer_token=TOKEN))
    conn.rollback()
    assert ep.get(conn, made.endpoint.id, schema=SCHEMA).auth_kind is None
    ep.update(conn, made.endpoint.id, schema=SCHEMA, box=SecretBox(),
              credentials=EndpointCredentials(bearer_token=TOKEN))
    conn.commit()
    assert ep.get(conn, made.endpoint.id, schema=SCHEMA).auth_kind == "bearer"


def test_cli_reads_a_token_from_stdin(db_url: str) -> None:
    from click.testing import CliRunner

    from outbox.cli import cli, load_commands

    load_commands()
    base = ["--database-url", db_url, "--schema", SCHEMA, "endpoints"]
    runner = CliRunner()
    added = runner.invoke(cli, [*base, "add", URL, "--bearer-token", "-"], input=TOKEN + "\n",
                          env={"OUTBOX_ALLOW_NETWORKS": None})
    assert added.exit_code == 0, added.output
    assert TOKEN not in added.output
    eid = added.stdout.split()[1]
    with psycopg.connect(db_url, autocommit=True) as c:
        opened = ep.delivery_credentials(c, eid, schema=SCHEMA, box=SecretBox())
    assert opened.auth_secret == TOKEN
    empty = runner.invoke(cli, [*base, "update", eid, "--basic-auth", "-"], input="")
    assert empty.exit_code == 2 and "standard input, which was empty" in empty.output
