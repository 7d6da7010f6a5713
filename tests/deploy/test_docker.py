"""deploy/Dockerfile and .dockerignore: parsed with ``dockerfile-parse``; the HEALTHCHECK command
runs against a loopback HTTP server; the build context holds every package the wheel needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from tests.deploy.files import (
    ROOT,
    configmap_env,
    dockerfile,
    dockerfile_uid,
    final_stage,
    instruction,
)


def test_dockerfile_bases_are_pinned_python_slim() -> None:
    parser = dockerfile()
    images = parser.parent_images
    assert len(images) >= 2, "multi-stage: build, then runtime"
    for image in images:
        name, _, tag = image.partition(":")
        assert name == "python" and "@" not in name
        assert re.fullmatch(r"3\.11\.\d+-slim-bookworm", tag), f"not an exact tag: {image}"
    assert len(set(images)) == 1, "same base in both stages (the venv is copied across)"


def test_dockerfile_builds_the_wheel_and_installs_the_worker_extra() -> None:
    structure = dockerfile().structure
    runs = " ".join(s["value"] for s in structure if s["instruction"] == "RUN")
    assert re.search(r"pip wheel (?=.*--no-deps)[^&]* \.(\s|$)", runs), runs
    assert "[worker]" in runs
    final = final_stage()
    assert any(s["instruction"] == "COPY" and "--from=" in s["value"] for s in final)
    assert not any(s["instruction"] in ("RUN",) and "pip install" in s["value"]
                   for s in final), "the runtime stage gets the venv, not pip"


def test_dockerfile_runtime_is_non_root_with_entrypoint_and_stop_signal() -> None:
    final = final_stage()
    assert dockerfile_uid() != 0
    assert json.loads(instruction(final, "ENTRYPOINT")) == ["outbox"]
    assert json.loads(instruction(final, "CMD")) == ["worker"]
    assert instruction(final, "STOPSIGNAL") == "SIGTERM"
    port = int(configmap_env()["OUTBOX_METRICS_PORT"])
    assert instruction(final, "EXPOSE").split() == [str(port)]
    assert f"OUTBOX_METRICS_PORT={port}" in instruction(final, "ENV")


def healthcheck_argv() -> list[str]:
    value = instruction(final_stage(), "HEALTHCHECK")
    options, cmd, exec_form = value.partition("CMD")
    assert cmd, value
    assert "--timeout=" in options and "--interval=" in options
    argv: list[str] = json.loads(exec_form)
    assert argv[:2] == ["python", "-c"], "no curl in slim images"
    return argv


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_dockerfile_healthcheck_asks_healthz(health_server: HTTPServer, status: int,
                                             healthy: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Health, "status", status)
    argv = healthcheck_argv()
    port = health_server.server_address[1]
    env = {**os.environ, "OUTBOX_METRICS_PORT": str(port)}
    done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True,
                          timeout=30)
    assert (done.returncode == 0) is healthy, done.stderr


def test_dockerfile_healthcheck_fails_when_nothing_listens(health_server: HTTPServer) -> None:
    port = health_server.server_address[1]
    health_server.shutdown()
    health_server.server_close()
    env = {**os.environ, "OUTBOX_METRICS_PORT": str(port)}
    done = subprocess.run([sys.executable, *healthcheck_argv()[1:]], env=env,
                          capture_output=True, timeout=30)
    assert done.returncode != 0


def _docker_pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated relative paths: ``*`` and
    ``?`` stop at ``/``, ``**`` crosses directories (Go's filepath.Match plus ``**``)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            j = pattern.index("]", i)
            out, i = out + pattern[i:j + 1], j + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str) -> bool:
    """Whether docker leaves ``path`` out of the build context: the last pattern matching
    the path or one of its parent directories wins; ``!`` lets it back in."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regex = _docker_pattern(pattern.removeprefix("!").strip().strip("/"))
        if any(regex.match(p) for p in prefixes):
            ignored = not negate
    return ignored


def copied_sources() -> list[str]:
    sources: list[str] = []
    for s in dockerfile().structure:
        if s["instruction"] == "COPY" and "--from=" not in s["value"]:
            sources.extend(p.rstrip("/") for p in s["value"].split()[:-1])
    return sources


def test_dockerfile_copies_every_package_the_wheel_needs() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool = project["tool"]["setuptools"]
    dirs = {tool.get("package-dir", {}).get(pkg, pkg.replace(".", "/"))
            for pkg in tool["packages"]}
    top = {d.split("/")[0] for d in dirs}
    needed = top | {"pyproject.toml", project["project"]["readme"]}
    assert needed <= set(copied_sources()), needed - set(copied_sources())


def test_dockerignore_lets_in_the_sources_and_keeps_out_the_rest() -> None:
    for source in copied_sources():
        assert not dockerignored(source), source
    for kept in ("outbox/__init__.py", "outbox/py.typed", "migrations/0001_initial.sql",
                 "delivery/worker.py"):
        assert not dockerignored(kept), kept
    for dropped in (".venv", ".venv/bin/python", ".git/config", "tests/conftest.py",
                    "bench/emit.py", "outbox/__pycache__/emit.cpython-311.pyc",
                    "outbox.egg-info/PKG-INFO", ".env"):
        assert dockerignored(dropped), dropped
