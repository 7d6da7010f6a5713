"""deploy/compose.yaml: the demo services, their order, the allowlist, and the emitter job run
against a test database."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from outbox._security.ssrf import parse_networks
from outbox.admin import endpoints as ep
from outbox.delivery.supervisor import KILL_AFTER_GRACE
from outbox.signing import decode_secret
from tests.deploy.files import (
    BACKLOG_QUERY,
    DEPLOY,
    ROOT,
    check_settings,
    configured_grace,
    duration_seconds,
    load_yaml_docs,
)


def compose() -> dict[str, Any]:
    doc = load_yaml_docs(DEPLOY / "compose.yaml")
    assert len(doc) == 1
    return doc[0]


def compose_default(value: str) -> str:
    """``${VAR:-default}`` as compose resolves it with VAR unset; ``$$`` is a literal $."""
    value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)
    return value.replace("$$", "$")


def test_compose_has_the_demo_services() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "migrate", "worker", "receiver", "emitter"}
    image = services["postgres"]["image"]
    assert re.fullmatch(r"postgres:\d+\.\d+-\w+", image), f"pin the exact version: {image}"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_compose_outbox_services_use_the_project_image() -> None:
    services = compose()["services"]
    for name in ("migrate", "worker", "receiver", "emitter"):
        build = services[name]["build"]
        assert (DEPLOY / build["context"]).resolve() == ROOT
        assert build["dockerfile"] == "deploy/Dockerfile"
        assert services[name]["image"] == services["worker"]["image"]


def test_compose_orders_migrate_before_workers() -> None:
    services = compose()["services"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("worker", "emitter"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"}
    worker = services["worker"]
    assert "deploy" not in worker, "one container: its supervisor runs the processes"
    assert worker["command"] == ["worker", "--processes", "2"]
    from outbox.cli.worker import worker as command

    assert command.make_context("worker", worker["command"][1:]).params["processes"] == 2
    grace = configured_grace(worker["environment"]) + KILL_AFTER_GRACE
    assert duration_seconds(worker["stop_grace_period"]) >= grace + 5


def test_compose_allowlist_lets_workers_reach_only_the_receiver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    doc = compose()
    services = doc["services"]
    receiver = services["receiver"]
    address = ipaddress.ip_address(receiver["networks"]["hooks"]["ipv4_address"])
    subnet = ipaddress.ip_network(doc["networks"]["hooks"]["ipam"]["config"][0]["subnet"])
    assert address in subnet
    for name in ("worker", "emitter"):
        env = services[name]["environment"]
        allowed = parse_networks(env["OUTBOX_ALLOW_NETWORKS"])
        assert any(address in n for n in allowed), name
        assert sum(n.num_addresses for n in allowed) == 1, "only the receiver"
        assert "hooks" in services[name]["networks"]
    check_settings({k: compose_default(str(v))
                    for k, v in services["worker"]["environment"].items()}, monkeypatch)
    assert "hooks" not in services["postgres"]["networks"]


def test_compose_receiver_command_matches_its_cli() -> None:
    receiver = compose()["services"]["receiver"]
    assert receiver["entrypoint"] == ["python", "-m", "outbox.testing.receiver"]
    argv = [compose_default(a) for a in receiver["command"]]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    done = subprocess.run([sys.executable, "-m", "outbox.testing.receiver", "--help"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0
    for flag in (a for a in argv if a.startswith("--")):
        assert flag in done.stdout, flag
    decode_secret(argv[argv.index("--secret") + 1])  # a valid whsec_ secret


def emitter_script() -> str:
    command = compose()["services"]["emitter"]["command"]
    assert isinstance(command, list) and len(command) == 1
    return compose_default(command[0])


def test_compose_emitter_registers_the_receiver_with_its_secret() -> None:
    services = compose()["services"]
    script = emitter_script()
    receiver_argv = [compose_default(a) for a in services["receiver"]["command"]]
    port = receiver_argv[receiver_argv.index("--port") + 1]
    url = f"http://receiver:{port}/hooks"
    assert f"url={url}" in script
    secret = compose_default(services["emitter"]["environment"]["DEMO_SECRET"])
    assert secret == receiver_argv[receiver_argv.index("--secret") + 1]
    # the CLI options the script uses exist
    from outbox.cli import cli
    from outbox.cli import endpoints as _endpoints  # noqa: F401  (registers the group)

    group: Any = cli.commands["endpoints"]
    for sub, line in (("add", "outbox endpoints add"), ("list", "outbox endpoints list")):
        options = {o for p in group.commands[sub].params for o in p.opts}
        text = script.split(line, 1)[1].split("\n")[0]
        text += script.split(line, 1)[1].split("\n")[1] if text.endswith("\\") else ""
        used = set(re.findall(r"--[a-z-]+", text))
        assert used and used <= options, (sub, used - options)


def test_compose_emitter_python_emits_deliveries(db_url: str) -> None:
    script = emitter_script()
    python = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    with psycopg.connect(db_url, autocommit=True) as conn:
        ep.add(conn, "https://example.com/hooks", schema="outbox", event_types=["invoice.paid"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    done = subprocess.run([sys.executable, "-c", python], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**env, "OUTBOX_DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("emitted 5 events:")
    with psycopg.connect(db_url) as conn:
        row = conn.execute(BACKLOG_QUERY).fetchone()
    assert row == (5,)
