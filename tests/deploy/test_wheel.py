"""The built wheel: one top-level import name (``outbox``), the worker and the migrations
inside it, and it imports from a directory that holds nothing but the wheel's files."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds and installs the wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--disable-pip-version-check", "-w", str(out), str(ROOT)], check=True)
    (built,) = out.glob("outbox-*.whl")
    return built


def test_only_top_level_name_is_outbox(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"outbox"}
    assert "outbox/delivery/worker.py" in names
    assert "outbox/delivery/py.typed" in names
    assert "outbox/delivery/transports/amqp.py" in names
    assert "outbox/delivery/queries/claim.py" in names
    assert "outbox/migrations/0001_initial.sql" in names
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["outbox"]


def test_installed_wheel_imports_worker_and_cli(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)],
                   check=True)
    code = ("import outbox.delivery.worker as w, outbox.cli, outbox.admin.migrations as m;"
            "print(w.__file__); print(len(m.available()))")
    done = subprocess.run([sys.executable, "-I", "-c",
                           f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    worker_file, migrations = done.stdout.split()
    assert worker_file.startswith(str(target))
    assert int(migrations) >= 3


def test_no_source_file_imports_a_top_level_delivery() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+delivery\b", re.MULTILINE)
    offenders = [str(p.relative_to(ROOT)) for top in ("outbox", "delivery", "tests", "bench")
                 for p in (ROOT / top).rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
