"""The operator commands through the real entry point (`python -m outbox`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cli import run_cli

COMMANDS = [["dead"], ["dead", "list"], ["dead", "show"], ["replay"], ["stats"], ["prune"],
            ["endpoints", "update"], ["endpoints", "rotate-secret"], ["endpoints", "ping"]]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_every_operator_command_has_help_with_an_example(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "outbox", *args, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Example" in done.stdout


@pytest.mark.parametrize(("args", "code", "message"), [
    (["dead", "show", "123"], 1, "error: no delivery 123\n"),
    (["replay", "--id", "123"], 1, "error: no delivery 123\n"),
    (["replay"], 2, "say what to replay"),
    (["dead", "list", "--since", "last tuesday"], 2, "'last tuesday' is neither a time ago"),
    (["replay", "--all", "--tenant", ""], 1, "error: tenant must be a non-empty string"),
    (["stats", "--tenant", "t" * 129], 1, "error: tenant is 129 characters, over 128\n"),
    (["endpoints", "rotate-secret", "00000000-0000-0000-0000-000000000000"], 1,
     "error: no endpoint 00000000-0000-0000-0000-000000000000\n"),
])
def test_errors_through_the_entry_point(db_url: str, args: list[str], code: int,
                                        message: str) -> None:
    done = run_cli(db_url, *args)
    assert done.returncode == code
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_replay_and_stats_through_the_entry_point(db_url: str) -> None:
    replay = run_cli(db_url, "replay", "--all")
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.splitlines()[-1] == "replayed 0 deliveries in 0 batch(es)"
    stats = run_cli(db_url, "stats")
    assert stats.returncode == 0, stats.stderr
    assert "due now: 0, oldest due: -" in stats.stdout
