#!/usr/bin/env python3
"""Developer entry point that works on a fresh machine with Python 3.11+.

    python3 deploy/dev.py demo    # emit events and deliver them to a local receiver
    python3 deploy/dev.py test    # the whole test suite (starts PostgreSQL if needed)
    python3 deploy/dev.py test --fast   # the same without the tests marked slow
    python3 deploy/dev.py lint    # ruff, mypy --strict and the import-layer contracts
    python3 deploy/dev.py docs    # the docs site, offline, warnings as errors -> site/
    python3 deploy/dev.py docs serve   # the same, live on http://127.0.0.1:8000

It creates ./.venv on first use and reinstalls the project (with its dev extra) whenever
pyproject.toml changes; `test` also installs the Debian tools the deploy/ tests run
(promtool, systemd-analyze), the browser tests drive (chromium, chromedriver) and the
pooler tests start (pgbouncer) when they are missing and apt-get is there, and starts the
brokers the broker-destination tests publish to (RabbitMQ, NATS JetStream, Redis) unless
they are already listening. Extra arguments go to the underlying command.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("OUTBOX_VENV", ROOT / ".venv"))
BIN = VENV / "bin"


def ensure_venv() -> None:
    """Create the virtualenv and install the project if pyproject.toml changed."""
    if sys.version_info < (3, 11):  # noqa: UP036 (this script may run on an old python3)
        sys.exit("outbox needs Python 3.11 or newer")
    stamp = VENV / ".outbox-installed"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    if not (BIN / "python").exists():
        print(f"creating virtualenv {VENV}", file=sys.stderr)
        venv.create(VENV, with_pip=True)
    print("installing outbox and its dev dependencies", file=sys.stderr)
    pip = [str(BIN / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    stamp.write_text(digest)


# Debian packages the tests run a program of; a missing program fails its test, not skips it.
TEST_TOOLS = {
    "promtool": "prometheus",
    "systemd-analyze": "systemd",
    "chromium": "chromium",  # tests/web/test_browser.py (headless, driven by Selenium)
    "chromedriver": "chromium-driver",
    # tests/support/brokers.py: the real brokers of the broker-destination tests
    "rabbitmq-server": "rabbitmq-server",
    "redis-server": "redis-server",
    "nats-server": "nats-server",
    "pgbouncer": "pgbouncer",  # tests/acceptance/test_pgbouncer.py (transaction pooling)
}

# port -> (directories it needs, the command that starts it in the background)
BROKERS = {
    5672: ((), ["rabbitmq-server", "-detached"]),
    6379: (("/var/lib/redis", "/var/log/redis"),
           ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port",
            "6379", "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
            "--logfile", "/var/log/redis/ci.log"]),
    4222: (("/var/lib/nats-server",),
           ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec",
            "/usr/sbin/nats-server", "--", "-a", "127.0.0.1", "-p", "4222", "-js", "-sd",
            "/var/lib/nats-server", "-l", "/var/log/nats-server.log"]),
}


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def ensure_brokers(timeout: float = 90.0) -> None:
    """Start each broker of BROKERS that is not listening on 127.0.0.1, and wait for it
    (RabbitMQ takes a few seconds). One that still does not listen makes its tests fail."""
    started = []
    for port, (dirs, command) in BROKERS.items():
        if _listening(port):
            continue
        program = command[0] if command[0] != "start-stop-daemon" else command[5]
        if shutil.which(program) is None and not os.path.exists(program):
            continue  # not installed: ensure_test_tools said so; its tests fail
        for path in dirs:
            os.makedirs(path, exist_ok=True)
        print(f"starting {' '.join(command[:1] if port != 4222 else command[5:6])}"
              f" for the tests (port {port})", file=sys.stderr)
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(port)
    deadline = time.monotonic() + timeout
    while started and time.monotonic() < deadline:
        started = [port for port in started if not _listening(port)]
        time.sleep(0.5)


def ensure_test_tools() -> None:
    """apt-get install the packages of TEST_TOOLS whose program is missing (as root only)."""
    missing = sorted({pkg for prog, pkg in TEST_TOOLS.items() if shutil.which(prog) is None})
    if not missing or shutil.which("apt-get") is None:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    print(f"installing {', '.join(missing)} for the tests", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
        subprocess.run([*sudo, "apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
        subprocess.run(install, env=env, stdout=subprocess.DEVNULL)


def fast(args: list[str]) -> list[str]:
    """pytest ``args`` without ``--fast`` and without the tests marked slow: the user's
    ``-m EXPR`` (the last one, as pytest reads it) becomes ``-m "not slow and (EXPR)"``;
    two -m options would leave only one in force."""
    rest: list[str] = []
    expr = ""
    items = iter(a for a in args if a != "--fast")
    for arg in items:
        if arg == "-m":
            expr = next(items, "")
        elif arg.startswith("-m") and len(arg) > 2:
            expr = arg[2:]
        else:
            rest.append(arg)
    return [*rest, "-m", f"not slow and ({expr})" if expr.strip() else "not slow"]


def run(*argv: str, env: dict[str, str] | None = None) -> int:
    return subprocess.run(list(argv), cwd=ROOT, env=env).returncode


def docs(args: list[str]) -> int:
    """Build the docs site (docs/mkdocs/mkdocs.yml) with warnings as errors, or ``serve`` it."""
    # mkdocs-material prints notices about the tool's future on every run; they are not
    # warnings about this site (strict mode still fails on those).
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    config = ["-f", str(ROOT / "docs" / "mkdocs" / "mkdocs.yml")]
    if args[:1] == ["serve"]:
        return run(str(BIN / "mkdocs"), "serve", *config, *args[1:], env=env)
    return run(str(BIN / "mkdocs"), "build", "--strict", *config, *args, env=env)


def main() -> int:
    command, *rest = sys.argv[1:] or ["help"]
    if command not in ("demo", "test", "lint", "docs"):
        print(__doc__)
        return 0 if command in ("help", "-h", "--help") else 2
    ensure_venv()
    if command == "demo":
        return run(str(BIN / "outbox"), "demo", *rest)
    if command == "docs":
        return docs(rest)
    if command == "test":
        ensure_test_tools()
        ensure_brokers()
        if "--fast" in rest:
            rest = fast(rest)
        return run(str(BIN / "python"), "-m", "pytest", *rest)
    return (run(str(BIN / "ruff"), "check", ".")
            or run(str(BIN / "mypy"), "--strict")
            or run(str(BIN / "lint-imports"))
            or 0)


if __name__ == "__main__":
    sys.exit(main())
