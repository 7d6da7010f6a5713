"""The README's quickstart works when pasted (against a test database and a free port), and
the docs' Getting started page shows the same one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs import snippet
from tests.support.net import free_port

pytestmark = pytest.mark.slow  # runs the quickstart in a shell

ROOT = Path(__file__).resolve().parents[2]


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert match, "the quickstart has a sh block"
    return match.group(1)


def test_getting_started_shows_the_readme_quickstart() -> None:
    assert snippet("getting-started.md", "quickstart", "sh") == _quickstart()


def test_quickstart_runs(blank_db_url: str, tmp_path: Path) -> None:
    script = _quickstart()
    lines = script.splitlines()
    assert lines[0].startswith("python3 -m venv"), "first line installs; the test skips it"
    script = "\n".join(lines[1:]).replace("8080", str(free_port()))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "DATABASE_URL": blank_db_url, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("OUTBOX_DATABASE_URL", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "signature=ok" in done.stdout
    assert "delivered=1" in done.stderr
