"""Endpoints: validation refuses before writing; the CLI explains itself."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from outbox import EndpointNotFound, InvalidEndpoint
from outbox.admin import endpoints as ep
from tests.support.cli import run_cli
from tests.support.pg import SCHEMA, count


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("/relative/path", "absolute http"),
        ("example.com/hook", "absolute http"),
        ("ftp://example.com/x", "absolute http"),
        ("https://user:pw@example.com/x", "credentials"),
        ("https://example.com/" + "a" * 2100, "over 2048"),
        ("https://exa mple.com/", "spaces"),
        ("https:///nohost", "no host"),
        ("https://example.com:99999/", "malformed"),
        ("https://example.com/#frag", "fragment"),
        ("", "empty"),
    ],
)
def test_bad_urls_write_nothing(db_url: str, url: str, reason: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as c,
        pytest.raises(InvalidEndpoint, match=reason),
    ):
        ep.add(c, url, schema=SCHEMA)
    assert count(db_url, "endpoints") == 0


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"secret": "whsec_notbase64!!"}, "secret"),
        ({"secret": "whsec_" + base64.b64encode(b"short").decode()}, "secret"),
        ({"headers": {"webhook-id": "x"}}, "set by outbox"),
        ({"headers": {"Content-Type": "x"}}, "set by outbox"),
        ({"headers": {"X-Ok": "a\r\nInjected: 1"}}, "control character"),
        ({"headers": {"bad name": "x"}}, "HTTP token"),
        ({"event_types": ["ok", "not ok"]}, "event-type filter"),
        ({"max_attempts": 0}, "max_attempts must be positive"),
        ({"timeout_seconds": -1.0}, "timeout_seconds must be positive"),
    ],
)
def test_bad_options_write_nothing(db_url: str, kwargs: dict[str, Any], reason: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as c,
        pytest.raises(InvalidEndpoint, match=reason),
    ):
        ep.add(c, "https://example.com/hook", schema=SCHEMA, **kwargs)
    assert count(db_url, "endpoints") == 0


def test_secret_never_in_error(db_url: str) -> None:
    bad = "whsec_" + base64.b64encode(b"tiny-secret-value").decode()
    with psycopg.connect(db_url, autocommit=True) as c, pytest.raises(InvalidEndpoint) as info:
        ep.add(c, "https://example.com/hook", schema=SCHEMA, secret=bad)
    assert bad not in str(info.value)
    assert bad[6:] not in str(info.value)


def test_add_list_disable_enable(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        created = ep.add(c, "https://example.com/a", schema=SCHEMA, event_types=["b", "a", "a"],
                         headers={"X-Team": "billing"})
        assert created.secret is not None and created.secret.startswith("whsec_")
        assert len(base64.b64decode(created.secret[6:])) == 32
        assert created.endpoint.event_types == ["a", "b"]
        given = ep.add(c, "http://example.com/b", schema=SCHEMA, secret=created.secret)
        assert given.secret is None
        off = ep.set_enabled(c, created.endpoint.id, False, schema=SCHEMA, reason="test")
        assert (off.enabled, off.disabled_reason) == (False, "test")
        on = ep.set_enabled(c, created.endpoint.id, True, schema=SCHEMA)
        assert (on.enabled, on.disabled_reason) == (True, None)
        assert [e.url for e in ep.list_all(c, schema=SCHEMA)] == [
            "https://example.com/a", "http://example.com/b"]
        with pytest.raises(EndpointNotFound):
            ep.get(c, "00000000-0000-0000-0000-000000000000", schema=SCHEMA)
        with pytest.raises(EndpointNotFound, match="look like a UUID"):
            ep.set_enabled(c, "nope", True, schema=SCHEMA)


@pytest.mark.slow
def test_cli_add_list_disable(db_url: str) -> None:
    added = run_cli(db_url, "endpoints", "add", "https://example.com/h", "--event-type",
                    "invoice.paid", "--header", "X-A=1")
    assert added.returncode == 0, added.stderr
    lines = dict(line.split(":", 1) for line in added.stdout.splitlines())
    endpoint_id, secret = lines["id"].strip(), lines["secret"].strip()
    assert secret.startswith("whsec_")
    listed = run_cli(db_url, "endpoints", "list", "--json")
    data = json.loads(listed.stdout)
    assert [d["id"] for d in data] == [endpoint_id]
    assert data[0]["headers"] == {"X-A": "1"}
    assert secret not in listed.stdout
    assert run_cli(db_url, "endpoints", "disable", endpoint_id).returncode == 0
    assert json.loads(run_cli(db_url, "endpoints", "list", "--json").stdout)[0]["enabled"] is False
    human = run_cli(db_url, "endpoints", "list")
    assert endpoint_id in human.stdout and "manual" in human.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["endpoints", "add", "ftp://x"], 1, "error: endpoint URL must be absolute"),
        (["endpoints", "add", "https://x.io", "--header", "novalue"], 2, "is not K=V"),
        (["endpoints", "add", "https://x.io", "--max-attempts", "-3"], 2, "-3"),
        (["endpoints", "disable", "not-an-id"], 1, "error: no endpoint 'not-an-id'"),
        (["endpoints", "enable", "00000000-0000-0000-0000-000000000000"], 1, "no endpoint"),
    ],
)
def test_cli_bad_input(db_url: str, args: list[str], code: int, message: str) -> None:
    done = run_cli(db_url, *args)
    assert done.returncode == code
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert count(db_url, "endpoints") == 0


def test_cli_unreachable_database_is_one_line() -> None:
    done = run_cli("postgresql://me:hunter2@127.0.0.1:1/nope", "endpoints", "list")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "postgresql://me:***@127.0.0.1:1/nope" in done.stderr
    assert "hunter2" not in done.stderr


def test_cli_missing_schema(blank_db_url: str) -> None:
    done = run_cli(blank_db_url, "endpoints", "list")
    assert done.returncode == 1
    assert "run `outbox migrate`" in done.stderr


@pytest.mark.parametrize("args", [[], ["migrate"], ["endpoints"], ["endpoints", "add"]])
def test_help_explains_itself(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "outbox", *args, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "Example" in done.stdout or "Typical first run" in done.stdout
