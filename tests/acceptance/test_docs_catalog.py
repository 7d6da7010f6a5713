"""docs/guides/catalog.md works when pasted: the model module, the emit script and the
shell steps (publish, emit, export, generate the receiver's models with
datamodel-code-generator), against a test database; the generated models then parse the
payload emit stored."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import execute

pytestmark = pytest.mark.slow  # runs the guide's shell steps

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "catalog.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)\n```", GUIDE.read_text(), re.S)


def python_file(first_line: str) -> str:
    (found,) = [b for b in blocks("python") if b.startswith(first_line)]
    return found


def test_the_guide_runs(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "shop_events.py").write_text(python_file("# shop_events.py"))
    (tmp_path / "emit_invoice.py").write_text(python_file("# emit_invoice.py"))
    (steps,) = [b for b in blocks("sh") if "datamodel-codegen" in b]
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "DATABASE_URL": db_url, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": str(tmp_path)}
    env.pop("OUTBOX_DATABASE_URL", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", steps], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "payload of 'invoice.paid' does not match its schema at $:" in done.stdout
    assert "amount_cents" in done.stdout
    ((payload,),) = execute(db_url, "SELECT payload::text FROM outbox.events")
    check = ("import sys, shop_webhooks\n"
             "paid = shop_webhooks.InvoicePaid.model_validate_json(sys.argv[1])\n"
             "assert paid.lines[0].sku == 'tea', paid\n"
             "print(type(paid).__name__)")
    parsed = subprocess.run([sys.executable, "-c", check, payload], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert parsed.stdout.strip() == "InvoicePaid", parsed.stderr


def test_the_readme_shows_the_flow_this_guide_runs() -> None:
    """The README's catalog section is the guide's model module and shell steps, verbatim
    (the test above runs them)."""
    readme = (ROOT / "README.md").read_text()
    steps = [b for b in blocks("sh") if "datamodel-codegen" in b]
    for block in ([python_file("# shop_events.py")], steps):
        (text,) = block
        assert text in readme
