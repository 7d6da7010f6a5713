"""Registering OAuth2 client credentials: all of token URL, client id and client secret or
none, each bad value refused with a clear error and nothing written, the secret stored
sealed and never shown (CLI, library), re-sealed by `outbox secrets reencrypt`, and the
database holding the same rules."""

from __future__ import annotations

import ipaddress
from typing import Any

import psycopg
import pytest

from outbox._security.secretbox import PREFIX, SecretBox, generate_key
from outbox.admin import endpoints as ep
from outbox.admin.endpoint_oauth2 import OAuth2Options
from outbox.admin.secrets import reencrypt
from outbox.errors import InvalidEndpoint
from tests.support.cli import invoke
from tests.support.pg import SCHEMA

URL = "https://hooks.example.com/in"
TOKEN_URL = "https://login.example.com/oauth2/token"
SECRET = "cs-very-secret-4711"
GOOD = {"oauth2_token_url": TOKEN_URL, "oauth2_client_id": "outbox",
        "oauth2_client_secret": SECRET}
LOCAL = [ipaddress.ip_network("127.0.0.0/8")]


def stored(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT url, oauth2_token_url, oauth2_client_id, oauth2_client_secret,"
                        f" oauth2_scope, headers FROM {SCHEMA}.endpoints ORDER BY id").fetchall()


def add(conn: psycopg.Connection[Any], url: str = URL, **values: Any) -> ep.Created:
    headers = values.pop("headers", None)
    return ep.add(conn, url, schema=SCHEMA, box=SecretBox(KEY), headers=headers,
                  oauth2=OAuth2Options.checked(values))


KEY = generate_key()


def test_added_with_all_three_the_secret_sealed_and_never_shown(
        conn: psycopg.Connection[Any]) -> None:
    created = add(conn, **GOOD, oauth2_scope="hooks:write read")
    e = created.endpoint
    assert (e.oauth2_token_url, e.oauth2_client_id, e.oauth2_scope) == (
        TOKEN_URL, "outbox", "hooks:write read")
    assert SECRET not in repr(e) and SECRET not in repr(created)
    ((_, url, cid, sealed, scope, _),) = stored(conn)
    assert (url, cid, scope) == (TOKEN_URL, "outbox", "hooks:write read")
    assert sealed.startswith(PREFIX) and SECRET not in sealed
    assert SecretBox(KEY).open(sealed) == SECRET
    assert SECRET not in repr(OAuth2Options.checked(GOOD))


BAD_ADD: list[tuple[dict[str, Any], str]] = [
    ({"oauth2_token_url": TOKEN_URL, "oauth2_client_id": "outbox"},
     "missing: oauth2_client_secret"),
    ({"oauth2_token_url": TOKEN_URL, "oauth2_client_secret": SECRET},
     "missing: oauth2_client_id"),
    ({"oauth2_client_id": "outbox", "oauth2_client_secret": SECRET},
     "missing: oauth2_token_url"),
    ({"oauth2_scope": "hooks"},
     "missing: oauth2_token_url, oauth2_client_id, oauth2_client_secret"),
    ({**GOOD, "oauth2_token_url": ""}, "oauth2_token_url is empty"),
    ({**GOOD, "oauth2_token_url": "ftp://login.example.com/t"}, "absolute http:// or https://"),
    ({**GOOD, "oauth2_token_url": "/oauth2/token"}, "absolute http:// or https://"),
    ({**GOOD, "oauth2_token_url": "https://u:p@login.example.com/t"}, "must not contain"
     " credentials"),
    ({**GOOD, "oauth2_token_url": "https://login.example.com/t#x"}, "#fragment"),
    ({**GOOD, "oauth2_token_url": "https://login.example.com/a b"}, "spaces or control"),
    ({**GOOD, "oauth2_token_url": "https://login.example.com:0/t"}, "port must be 1-65535"),
    ({**GOOD, "oauth2_token_url": "https://login.example.com/" + "a" * 2048},
     "oauth2_token_url: string should have at most 2048 characters"),
    ({**GOOD, "oauth2_client_id": ""}, "oauth2_client_id: string should have at least 1"),
    ({**GOOD, "oauth2_client_id": "out\x00box"}, "oauth2_client_id: string should match"),
    ({**GOOD, "oauth2_client_id": "x" * 1025}, "oauth2_client_id: string should have at most"),
    ({**GOOD, "oauth2_client_secret": "s\x1bcret"}, "oauth2_client_secret: string should"
     " match"),
    ({**GOOD, "oauth2_client_secret": "s" * 4097}, "oauth2_client_secret: string should have"
     " at most 4096"),
    ({**GOOD, "oauth2_scope": 'a "b"'}, "oauth2_scope must be scope tokens"),
    ({**GOOD, "oauth2_scope": "a  b"}, "oauth2_scope must be scope tokens"),
    ({**GOOD, "oauth2_scope": "a\\b"}, "oauth2_scope must be scope tokens"),
    ({**GOOD, "oauth2_scope": "x" * 1025}, "oauth2_scope: string should have at most"),
    ({**GOOD, "oauth2_extra": "x"}, "oauth2_extra: extra inputs are not permitted"),
    ({**GOOD, "headers": {"Authorization": "Bearer x"}}, "header 'Authorization' cannot be"
     " set on an endpoint with OAuth2"),
]


@pytest.mark.parametrize(("values", "says"), BAD_ADD,
                         ids=[f"{i}-{says[:24]}" for i, (_, says) in enumerate(BAD_ADD)])
def test_a_bad_oauth2_option_is_refused_and_nothing_written(
        conn: psycopg.Connection[Any], values: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidEndpoint) as refused:
        add(conn, **values)
    assert says in str(refused.value)
    assert SECRET not in str(refused.value) and "s\x1bcret" not in str(refused.value)
    assert stored(conn) == []


def test_oauth2_on_a_broker_url_is_refused(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(InvalidEndpoint, match="http\\(s\\) endpoints only"):
        add(conn, "amqp://127.0.0.1/shop?exchange=orders", **GOOD)
    assert stored(conn) == []


def test_a_token_url_the_ssrf_policy_refuses_is_refused(conn: psycopg.Connection[Any]) -> None:
    for host in ("127.0.0.1", "10.1.2.3", "[::1]", "localhost"):
        with pytest.raises(InvalidEndpoint, match=r"oauth2_token_url .* set OUTBOX_ALLOW_NET"):
            ep.add(conn, URL.replace("hooks.example.com", "127.0.0.1"), schema=SCHEMA,
                   oauth2=OAuth2Options.checked({**GOOD, "oauth2_token_url":
                                                f"http://{host}:8080/token"}),
                   allow_networks=[], box=SecretBox())
    assert stored(conn) == []
    created = ep.add(conn, "http://127.0.0.1:9/in", schema=SCHEMA, allow_networks=LOCAL,
                     oauth2=OAuth2Options.checked({**GOOD, "oauth2_token_url":
                                                  "http://127.0.0.1:8080/token"}),
                     box=SecretBox())
    assert created.endpoint.oauth2_token_url == "http://127.0.0.1:8080/token"


def test_update_changes_one_option_of_a_configured_endpoint(
        conn: psycopg.Connection[Any]) -> None:
    e = add(conn, **GOOD, oauth2_scope="a b").endpoint
    box = SecretBox(KEY)
    ep.update(conn, e.id, schema=SCHEMA, box=box,
              oauth2=OAuth2Options.checked({"oauth2_client_secret": "cs-rotated"}))
    ((_, url, cid, sealed, scope, _),) = stored(conn)
    assert (url, cid, scope, box.open(sealed)) == (TOKEN_URL, "outbox", "a b", "cs-rotated")
    done = ep.update(conn, e.id, schema=SCHEMA, box=box,
                     oauth2=OAuth2Options.checked({"oauth2_scope": ""}))
    assert done.endpoint.oauth2_scope is None and done.endpoint.oauth2_client_id == "outbox"
    cleared = ep.update(conn, e.id, schema=SCHEMA, clear_oauth2=True).endpoint
    assert (cleared.oauth2_token_url, cleared.oauth2_client_id) == (None, None)
    assert stored(conn)[0][1:5] == (None, None, None, None)


@pytest.mark.parametrize(("configured", "change", "says"), [
    (False, {"oauth2": {"oauth2_client_secret": "x"}},
     "missing: oauth2_token_url, oauth2_client_id"),
    (True, {"oauth2": {"oauth2_client_id": "x"}, "clear_oauth2": True},
     "give OAuth2 options or clear_oauth2, not both"),
    (True, {"headers": {"authorization": "Basic eDp5"}}, "header 'Authorization' cannot"),
    (True, {"url": "redis://127.0.0.1/0?stream=s"}, "http(s) endpoints only"),
    (True, {"oauth2": {"oauth2_token_url": "http://127.0.0.1/token"}},
     "resolves to 127.0.0.1"),
])
def test_a_bad_update_is_refused_and_nothing_changes(
        conn: psycopg.Connection[Any], configured: bool, change: dict[str, Any],
        says: str) -> None:
    e = (add(conn, **GOOD) if configured else add(conn)).endpoint
    before = stored(conn)
    if "oauth2" in change:
        change["oauth2"] = OAuth2Options.checked(change["oauth2"])
    with pytest.raises(InvalidEndpoint) as refused:
        ep.update(conn, e.id, schema=SCHEMA, box=SecretBox(KEY), allow_networks=[], **change)
    assert says in str(refused.value)
    assert stored(conn) == before


def test_reencrypt_reseals_the_client_secret(conn: psycopg.Connection[Any]) -> None:
    ep.add(conn, URL, schema=SCHEMA, box=SecretBox(), oauth2=OAuth2Options.checked(GOOD))
    ep.add(conn, URL, schema=SCHEMA, box=SecretBox())  # no OAuth2: stays NULL
    assert stored(conn)[0][3] == SECRET or stored(conn)[1][3] == SECRET  # plain: no key
    new = generate_key()
    assert reencrypt(conn, schema=SCHEMA, box=SecretBox(new)) == 2
    secrets = sorted((s for *_, s, _, _ in stored(conn)), key=lambda s: s is None)
    assert secrets[1] is None and secrets[0].startswith(PREFIX)
    assert SecretBox(new).open(secrets[0]) == SECRET
    newer = generate_key()
    assert reencrypt(conn, schema=SCHEMA, box=SecretBox(f"{newer},{new}")) == 2
    (sealed,) = [s for *_, s, _, _ in stored(conn) if s]
    assert SecretBox(newer).open(sealed) == SECRET


@pytest.mark.parametrize("values", [
    "'https://t.example/t', 'id', NULL, NULL",
    "NULL, 'id', 'secret', NULL",
    "NULL, NULL, NULL, 'scope'",
    "'ftp://t.example/t', 'id', 'secret', NULL",
    "'https://t.example/t', E'i\\x01d', 'secret', NULL",
    "'https://t.example/t', 'id', '', NULL",
    "'https://t.example/t', 'id', 'secret', 'a  b'",
    "'https://t.example/t', 'id', 'secret', 'a\"b'",
])
def test_the_database_holds_the_same_rules(conn: psycopg.Connection[Any], values: str) -> None:
    e = add(conn).endpoint
    conn.commit()
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(f"UPDATE {SCHEMA}.endpoints SET (oauth2_token_url, oauth2_client_id,"
                     f" oauth2_client_secret, oauth2_scope) = ({values}) WHERE id = %s",
                     (e.id,))
    conn.rollback()
    conn.execute(f"UPDATE {SCHEMA}.endpoints SET (oauth2_token_url, oauth2_client_id,"
                 " oauth2_client_secret, oauth2_scope) = ('https://t.example/t', 'id ok',"
                 " 'secret', 'a:b c/d') WHERE id = %s", (e.id,))


def test_cli_add_show_update_never_print_the_secret(db_url: str) -> None:
    env = {"OUTBOX_SECRET_KEY": KEY}
    added = invoke(db_url, "endpoints", "add", URL, "--oauth2-token-url", TOKEN_URL,
                   "--oauth2-client-id", "outbox", "--oauth2-client-secret", SECRET,
                   "--oauth2-scope", "hooks", env=env)
    assert added.exit_code == 0, added.output
    (eid,) = [line.split()[1] for line in added.output.splitlines() if line.startswith("id:")]
    assert "warning: oauth2_token_url: " in added.output  # login.example.com: no address
    shown = invoke(db_url, "endpoints", "show", eid, env=env)
    assert f"oauth2:       client outbox at {TOKEN_URL}, scope hooks" in shown.output
    as_json = invoke(db_url, "endpoints", "show", eid, "--json", env=env)
    listed = invoke(db_url, "endpoints", "list", "--json", env=env)
    updated = invoke(db_url, "endpoints", "update", eid, "--oauth2-client-secret", "cs-new-1",
                     env=env)
    assert updated.exit_code == 0 and "oauth2:      client outbox" in updated.output
    for result in (added, shown, as_json, listed, updated):
        assert SECRET not in result.output and "cs-new-1" not in result.output
    assert '"oauth2_client_id": "outbox"' in as_json.output
    removed = invoke(db_url, "endpoints", "update", eid, "--no-oauth2", env=env)
    assert removed.exit_code == 0 and "oauth2:      -" in removed.output


def test_cli_refuses_a_partial_oauth2_and_writes_nothing(db_url: str) -> None:
    refused = invoke(db_url, "endpoints", "add", URL, "--oauth2-token-url", TOKEN_URL,
                     "--oauth2-client-secret", SECRET)
    assert refused.exit_code == 1
    assert "missing: oauth2_client_id" in refused.output and SECRET not in refused.output
    assert invoke(db_url, "endpoints", "list", "--json").output.strip() == "[]"
    bad = invoke(db_url, "endpoints", "add", URL, *[f for k, v in GOOD.items() for f in (
        "--" + k.replace("_", "-"), v)], "--oauth2-scope", 'x"y')
    assert bad.exit_code == 1 and "oauth2_scope must be scope tokens" in bad.output


def test_one_auth_scheme_per_endpoint(conn: psycopg.Connection[Any]) -> None:
    """Basic/bearer auth and OAuth2 both set Authorization: never both on one endpoint
    (refused before any write, and by the database's endpoints_one_auth_scheme CHECK);
    switching needs the old scheme cleared in the same update."""
    from outbox.admin.endpoint_options import CredentialChanges, EndpointCredentials

    bearer = EndpointCredentials(bearer_token="tok-one-scheme")
    with pytest.raises(InvalidEndpoint, match="both bearer auth and OAuth2"):
        ep.add(conn, URL, schema=SCHEMA, box=SecretBox(KEY), credentials=bearer,
               oauth2=OAuth2Options.checked(GOOD))
    assert stored(conn) == []
    eid = ep.add(conn, URL, schema=SCHEMA, box=SecretBox(KEY), credentials=bearer).endpoint.id
    with pytest.raises(InvalidEndpoint, match="both bearer auth and OAuth2"):
        ep.update(conn, eid, schema=SCHEMA, box=SecretBox(KEY),
                  oauth2=OAuth2Options.checked(GOOD))
    assert stored(conn)[0][1] is None
    switched = ep.update(conn, eid, schema=SCHEMA, box=SecretBox(KEY),
                         oauth2=OAuth2Options.checked(GOOD),
                         credentials=CredentialChanges(clear_auth=True)).endpoint
    assert (switched.auth_kind, switched.oauth2_token_url) == (None, TOKEN_URL)
    with pytest.raises(InvalidEndpoint, match="both basic auth and OAuth2"):
        ep.update(conn, eid, schema=SCHEMA, box=SecretBox(KEY),
                  credentials=CredentialChanges(basic_auth="u:p-one-scheme"))
    with pytest.raises(psycopg.errors.CheckViolation, match="endpoints_one_auth_scheme"):
        conn.execute(f"UPDATE {SCHEMA}.endpoints SET auth_kind = 'bearer', auth_secret = 'x'")
