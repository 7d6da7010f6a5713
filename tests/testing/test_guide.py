"""docs/guides/testing.md works when pasted: its example conftest.py and test file, written to
a directory of their own, pass under a separate pytest that gets outbox's fixtures through the
``pytest11`` entry point alone (no conftest line, no ``-p``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "testing.md"


def _example_files() -> dict[str, str]:
    """The guide's ```python blocks whose first line is ``# <file>.py``, by file name."""
    blocks = re.findall(r"```python\n(.*?)\n```", GUIDE.read_text(), re.S)
    files = {}
    for block in blocks:
        first = block.splitlines()[0]
        if re.fullmatch(r"# \w+\.py", first):
            files[first[2:]] = block + "\n"
    return files


def _pytest(directory: Path, server_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTBOX_TEST_DATABASE_URL": server_url}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory, env=env, capture_output=True, text=True, timeout=240)


def test_the_guide_has_the_example_files() -> None:
    assert set(_example_files()) == {"conftest.py", "test_orders.py"}


def test_the_guides_example_passes_through_the_entry_point(server_url: str,
                                                           tmp_path: Path) -> None:
    for name, text in _example_files().items():
        (tmp_path / name).write_text(text)
    done = _pytest(tmp_path, server_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b4 passed\b", done.stdout), done.stdout


def test_without_the_plugin_the_fixtures_are_missing(server_url: str, tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_db(outbox_database_url):\n    pass\n")
    assert _pytest(tmp_path, server_url).returncode == 0
    done = _pytest(tmp_path, server_url, "-p", "no:outbox")
    assert done.returncode != 0
    assert "fixture 'outbox_database_url' not found" in done.stdout


def test_the_option_names_the_server(server_url: str, tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_db(outbox_database_url):\n    pass\n")
    done = _pytest(tmp_path, server_url, "--outbox-database-url",
                   "postgresql://nobody:pw@127.0.0.1:1/postgres")
    assert done.returncode != 0
    assert "postgresql://nobody:***@127.0.0.1:1/postgres is not reachable" in done.stdout


def test_every_public_name_is_in_the_guide() -> None:
    import outbox.testing

    text = GUIDE.read_text()
    assert sorted(dir(outbox.testing)) == sorted(outbox.testing.__all__)
    for name in outbox.testing.__all__:
        assert getattr(outbox.testing, name) is not None
        assert f"`{name}" in text, name
