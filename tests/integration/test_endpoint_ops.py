"""`outbox endpoints add/update/rotate-secret/ping`: address check, edits, rotation, ping."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest

import outbox
from outbox.admin import endpoints as ep
from outbox.testing.receiver import Behaviour, Receiver
from tests.support.cli import execute, invoke, snapshot
from tests.support.pg import SCHEMA, count
from tests.support.workers import SECRET, add_endpoint, drain, emit, settings

LOOPBACK = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"}


def _endpoint(db_url: str, endpoint: uuid.UUID) -> dict[str, object]:
    listed = json.loads(invoke(db_url, "endpoints", "list", "--json").stdout)
    return next(e for e in listed if e["id"] == str(endpoint))


# --- registration-time SSRF check ------------------------------------------------------

@pytest.mark.parametrize(("url", "address", "reason"), [
    ("http://127.0.0.1:8080/hooks", "127.0.0.1", "loopback"),
    ("http://localhost:8080/hooks", "127.0.0.1", "loopback"),
    ("http://10.1.2.3/hooks", "10.1.2.3", "private network"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254", "link-local"),
    ("http://[::ffff:127.0.0.1]/", "::ffff:7f00:1", "IPv4-mapped"),
])
def test_add_refuses_non_public_addresses(db_url: str, url: str, address: str,
                                          reason: str) -> None:
    done = invoke(db_url, "endpoints", "add", url)
    assert done.exit_code == 1
    assert done.stderr.startswith(f"error: endpoint URL {url} resolves to {address} ")
    assert reason in done.stderr
    assert done.stderr.rstrip().endswith("set OUTBOX_ALLOW_NETWORKS to allow it")
    assert count(db_url, "endpoints") == 0


def test_allow_networks_lets_a_local_receiver_register(db_url: str) -> None:
    done = invoke(db_url, "endpoints", "add", "http://127.0.0.1:8080/hooks", env=LOOPBACK)
    assert done.exit_code == 0, done.output
    assert count(db_url, "endpoints") == 1


def test_unresolvable_host_is_a_warning(db_url: str) -> None:
    done = invoke(db_url, "endpoints", "add", "https://no-such-host.invalid/hooks")
    assert done.exit_code == 0, done.output
    assert "warning: cannot resolve no-such-host.invalid" in done.stderr
    assert count(db_url, "endpoints") == 1



# Names RFC 6761 reserves for loopback: refused by name whatever the resolver says.
LOOPBACK_NAMED = ["http://api.localhost/x", "http://LOCALHOST./x", "http://localhost./x",
                  "http://a.b.LocalHost.:8080/x"]


@pytest.mark.parametrize("url", LOOPBACK_NAMED)
def test_add_refuses_loopback_names(db_url: str, url: str) -> None:
    done = invoke(db_url, "endpoints", "add", url)
    assert done.exit_code == 1, done.output
    assert done.stderr == (f"error: endpoint URL {url} resolves to 127.0.0.1 "
                           "(loopback name, RFC 6761); set OUTBOX_ALLOW_NETWORKS to allow it\n")
    assert count(db_url, "endpoints") == 0
    with psycopg.connect(db_url, autocommit=True) as c, \
            pytest.raises(outbox.InvalidEndpoint, match=r"\(loopback name, RFC 6761\)"):
        ep.add(c, url, schema=SCHEMA, allow_networks=())
    assert count(db_url, "endpoints") == 0


def test_update_url_refuses_loopback_names(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "https://hooks.example.com/x")
    before = snapshot(db_url)
    for url in ("http://api.localhost/x", "http://LOCALHOST./x"):
        done = invoke(db_url, "endpoints", "update", str(endpoint), "--url", url)
        assert done.exit_code == 1, done.output
        assert f"error: endpoint URL {url} resolves to 127.0.0.1 (loopback name" in done.stderr
        with psycopg.connect(db_url, autocommit=True) as c, \
                pytest.raises(outbox.InvalidEndpoint, match="loopback name"):
            ep.update(c, endpoint, schema=SCHEMA, url=url, allow_networks=())
    assert snapshot(db_url) == before


def test_allow_networks_lets_loopback_names_register(db_url: str) -> None:
    for url in ("http://api.localhost:8080/x", "http://LOCALHOST.:8080/x"):
        done = invoke(db_url, "endpoints", "add", url, env=LOOPBACK)
        assert done.exit_code == 0, done.output  # (a warning if this host cannot resolve it)
    assert count(db_url, "endpoints") == 2


def test_bad_allow_networks_setting(db_url: str) -> None:
    done = invoke(db_url, "endpoints", "add", "https://x.invalid/",
                  env={"OUTBOX_ALLOW_NETWORKS": "127.0.0.1/8"})
    assert done.exit_code == 1
    assert "error: invalid setting allow_networks" in done.stderr
    assert count(db_url, "endpoints") == 0


# --- update ----------------------------------------------------------------------------

def test_update_changes_only_what_is_given(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/old", event_types=["a.b"],
                            headers={"X-Keep": "1", "X-Change": "old"}, description="d")
    done = invoke(db_url, "endpoints", "update", str(endpoint), "--url",
                  "http://127.0.0.1:9/new", "--header", "X-Change=new", "--max-attempts", "4",
                  env=LOOPBACK)
    assert done.exit_code == 0, done.output
    assert f"updated {endpoint}" in done.stdout
    e = _endpoint(db_url, endpoint)
    assert e["url"] == "http://127.0.0.1:9/new"
    assert e["headers"] == {"X-Keep": "1", "X-Change": "new"}
    assert (e["max_attempts"], e["event_types"], e["description"]) == (4, ["a.b"], "d")
    invoke(db_url, "endpoints", "update", str(endpoint), "--clear-headers", "--header", "A=1",
           "--event-type", "c.d", "--event-type", "a.b", "--retry-base-seconds", "2",
           "--retry-cap-seconds", "30", "--timeout", "5", "--description", "new text")
    e = _endpoint(db_url, endpoint)
    assert (e["headers"], e["event_types"], e["description"]) == ({"A": "1"}, ["a.b", "c.d"],
                                                                  "new text")
    assert (e["retry_base_seconds"], e["retry_cap_seconds"], e["timeout_seconds"]) == (2, 30, 5)
    invoke(db_url, "endpoints", "update", str(endpoint), "--all-event-types", "--clear-headers")
    e = _endpoint(db_url, endpoint)
    assert (e["event_types"], e["headers"]) == (None, {})


def test_update_event_types_apply_to_new_events(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x", event_types=["a.b"])
    emit(db_url, 1, "c.d")
    invoke(db_url, "endpoints", "update", str(endpoint), "--event-type", "c.d")
    emit(db_url, 1, "c.d")
    assert count(db_url, "deliveries") == 1


@pytest.mark.parametrize(("args", "code", "message"), [
    ([], 2, "nothing to update"),
    (["--url", "ftp://x/"], 1, "error: endpoint URL must be absolute"),
    (["--url", "http://127.0.0.1:1/x"], 1, "resolves to 127.0.0.1 (loopback)"),
    (["--header", "Content-Type=x"], 1, "set by outbox"),
    (["--header", "novalue"], 2, "is not K=V"),
    (["--event-type", "not ok"], 1, "event-type filter"),
    (["--event-type", "a.b", "--all-event-types"], 2, "contradict"),
    (["--max-attempts", "0"], 2, "0"),
    (["--timeout", "-1"], 2, "-1"),
])
def test_update_bad_input_changes_nothing(db_url: str, args: list[str], code: int,
                                          message: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    before = snapshot(db_url)
    done = invoke(db_url, "endpoints", "update", str(endpoint), *args)
    assert done.exit_code == code, done.output
    assert message in done.stderr
    assert snapshot(db_url) == before


@pytest.mark.parametrize("command", ["update", "rotate-secret", "ping"])
def test_unknown_endpoint(db_url: str, command: str) -> None:
    extra = ["--description", "x"] if command == "update" else []
    missing = invoke(db_url, "endpoints", command, str(uuid.uuid4()), *extra)
    assert missing.exit_code == 1 and "error: no endpoint" in missing.stderr
    bad = invoke(db_url, "endpoints", command, "nope", *extra)
    assert bad.exit_code == 1 and "error: no endpoint 'nope'" in bad.stderr


# --- rotate-secret ---------------------------------------------------------------------

def _signatures(headers: dict[str, str]) -> list[str]:
    return headers["webhook-signature"].split(" ")


@pytest.mark.slow
def test_rotation_signs_with_both_secrets_until_the_grace_ends(db_url: str) -> None:
    with Receiver() as rx:
        endpoint = add_endpoint(db_url, rx.url + "/rotating")
        done = invoke(db_url, "endpoints", "rotate-secret", str(endpoint), "--grace", "3s")
        assert done.exit_code == 0, done.output
        new_secret = dict(line.split(": ", 1) for line in done.stdout.splitlines())["secret"]
        new_secret = new_secret.strip()
        assert new_secret.startswith("whsec_") and new_secret != SECRET
        assert "the old secret also signs until" in done.stderr
        rotated_at = time.monotonic()
        emit(db_url, 1)
        drain(settings(db_url))
        while time.monotonic() - rotated_at < 3.2:
            time.sleep(0.1)
        emit(db_url, 1)
        drain(settings(db_url))
        assert rx.wait_for(2, 5)
    during, after = rx.received
    assert len(_signatures(during.headers)) == 2
    for secret in (SECRET, new_secret):  # a receiver holding either secret accepts it
        outbox.verify(secret, during.body, during.headers)
    assert len(_signatures(after.headers)) == 1
    outbox.verify(new_secret, after.body, after.headers)
    with pytest.raises(outbox.InvalidSignature):
        outbox.verify(SECRET, after.body, after.headers)


def test_rotating_during_a_rotation_is_refused_unless_forced(db_url: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    assert invoke(db_url, "endpoints", "rotate-secret", str(endpoint)).exit_code == 0
    before = snapshot(db_url)
    again = invoke(db_url, "endpoints", "rotate-secret", str(endpoint))
    assert again.exit_code == 1
    assert "still in a rotation" in again.stderr and "--force" in again.stderr
    assert snapshot(db_url) == before
    given = outbox.generate_secret()
    forced = invoke(db_url, "endpoints", "rotate-secret", str(endpoint), "--force",
                    "--secret", given, "--grace", "0s")
    assert forced.exit_code == 0, forced.output
    assert given not in forced.stdout  # a given secret is not echoed
    assert execute(db_url, f"SELECT secret, previous_secret_expires_at <= now() FROM {SCHEMA}"
                           ".endpoints") == [(given, True)]


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--grace", "-1h"], 2, "negative"), (["--grace", "soon"], 2, "not a duration"),
    (["--secret", "whsec_short"], 1, "webhook secret"),
])
def test_rotate_bad_input(db_url: str, args: list[str], code: int, message: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    before = snapshot(db_url)
    done = invoke(db_url, "endpoints", "rotate-secret", str(endpoint), *args)
    assert done.exit_code == code, done.output
    assert message in done.stderr
    assert snapshot(db_url) == before


# --- ping ------------------------------------------------------------------------------

def test_ping_sends_a_signed_event_and_writes_nothing(db_url: str) -> None:
    with Receiver(secret=SECRET, default=Behaviour(body=b'{"ok":true}')) as rx:
        endpoint = add_endpoint(db_url, rx.url + "/ping", headers={"X-Team": "billing"})
        before = snapshot(db_url)
        done = invoke(db_url, "endpoints", "ping", str(endpoint), env=LOOPBACK)
        assert done.exit_code == 0, done.output
        assert rx.wait_for(1, 5)
    (got,) = rx.received
    assert got.signature_ok is True
    assert json.loads(got.body)["type"] == "outbox.ping"
    assert got.headers["x-team"] == "billing"
    assert "/ping: 200 in " in done.stdout and "(delivered)" in done.stdout
    assert f"webhook-id: {got.webhook_id}" in done.stdout
    assert '{"ok":true}' in done.stdout
    assert snapshot(db_url) == before


def test_ping_reports_a_failing_receiver(db_url: str) -> None:
    with Receiver(default=Behaviour(status=503, body=b"down for maintenance")) as rx:
        endpoint = add_endpoint(db_url, rx.url + "/ping")
        done = invoke(db_url, "endpoints", "ping", str(endpoint), "--json", env=LOOPBACK)
    assert done.exit_code == 1
    result = json.loads(done.stdout)
    assert (result["status"], result["verdict"]) == (503, "retry")
    assert result["response"] == "down for maintenance"
    assert "error: ping to" in done.stderr and "HTTP 503" in done.stderr


def test_ping_goes_through_the_ssrf_guard(db_url: str) -> None:
    with Receiver() as rx:
        endpoint = add_endpoint(db_url, rx.url + "/ping")
        done = invoke(db_url, "endpoints", "ping", str(endpoint))
    assert done.exit_code == 1
    assert rx.received == []
    assert "loopback" in done.stderr and "OUTBOX_ALLOW_NETWORKS" in done.stderr
