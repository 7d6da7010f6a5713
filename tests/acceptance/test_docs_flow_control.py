"""The snippets of docs/guides/flow-control.md work when pasted (against a test database)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.support.pg import SCHEMA

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "flow-control.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)\n```", PAGE.read_text(), re.S)


def test_the_sh_snippet_sets_shows_and_clears_a_limit(db_url: str) -> None:
    (script,) = _blocks("sh")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA,
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rate limit:   20/s, burst 100" in done.stdout
    assert "allowed rate: 20/s" in done.stdout
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT rate_limit FROM outbox.endpoints").fetchall() == [(None,)]


def test_the_python_snippet(db_url: str) -> None:
    (code,) = _blocks("python")
    code = code.replace('"postgresql://localhost/app"', repr(db_url))
    namespace: dict[str, object] = {}
    exec(compile(code, str(PAGE), "exec"), namespace)  # the page's own code
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT rate_limit, rate_burst FROM outbox.endpoints"
                         ).fetchall() == [(20.0, 100)]
