"""The README's first command: the demo delivers everything, signed."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs the demo command


def test_demo_delivers_everything(db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "--database-url", db_url, "--schema", "demo_test",
         "demo", "--events", "8"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # 8 events to /all, 2 of them invoice.paid also to /flaky (first answer 503, retried)
    assert "received 11 requests for 8 webhook-ids; 0 bad signatures" in out
    assert "delivered    10 deliveries, 11 attempts" in out
    assert "answered 503" in out
    assert "rolled back" in out and "BAD SIGNATURE" not in out
