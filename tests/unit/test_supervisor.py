"""``outbox worker --processes``: the option's values and what ``auto`` counts."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from outbox.cli import cli, load_commands
from outbox.delivery.cpus import _cgroup_cpus
from outbox.delivery.supervisor import (
    GIVE_UP_AFTER,
    KILL_AFTER_GRACE,
    RESTART_FIRST,
    RESTART_MAX,
    STABLE_AFTER,
    Group,
)


@pytest.mark.parametrize("value", ["0", "-1", "many", "1.5", "", "1025", "\u00b2", "\u0663",
                                   "1\u00b2"])
def test_processes_must_be_auto_or_a_whole_number(value: str) -> None:
    load_commands()
    result = CliRunner().invoke(cli, ["worker", "--processes", value])
    assert result.exit_code == 2
    assert "is not 'auto' or a whole number from 1 to 1024" in result.output


def test_processes_from_the_environment_is_checked_too() -> None:
    load_commands()
    result = CliRunner().invoke(cli, ["worker"], env={"OUTBOX_PROCESSES": "lots"})
    assert result.exit_code == 2
    assert "OUTBOX_PROCESSES" in result.output or "--processes" in result.output


def test_auto_counts_the_cpus_this_process_may_use() -> None:
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
            "from outbox.delivery.cpus import available_cpus; print(available_cpus())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "1"
    from outbox.delivery.cpus import available_cpus

    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("max 100000", None), ("150000 100000", 2), ("100000 100000", 1), ("50000 100000", 1),
    ("400000 100000", 4)])
def test_a_cgroup_cpu_quota_caps_auto(tmp_path: Path, cpu_max: str, expected: int | None
                                      ) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("0::/system.slice/outbox-worker.service\n")
    own = tmp_path / "fs" / "system.slice" / "outbox-worker.service"
    own.mkdir(parents=True)
    (own / "cpu.max").write_text(cpu_max + "\n")
    assert _cgroup_cpus(membership, tmp_path / "fs") == expected


def test_no_cgroup_quota_file_means_no_cap(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("0::/\n")
    assert _cgroup_cpus(membership, tmp_path / "fs") is None
    assert _cgroup_cpus(tmp_path / "missing", tmp_path / "fs") is None


def test_a_missing_worker_dependency_is_named_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor does not import the worker; it still refuses to start children that
    would all fail on a missing package of the ``worker`` extra."""
    import importlib.metadata

    from outbox import worker as worker_seam
    from outbox.errors import ConfigurationError

    monkeypatch.setattr(importlib.metadata, "requires", lambda _name: [
        'httpx>=0.27; extra == "worker"', 'no-such-package-xyz>=1.0; extra == "worker"',
        'also-missing; extra == "other"'])
    with pytest.raises(ConfigurationError, match=r"missing no-such-package-xyz\):"
                                                 r" pip install 'outbox\[worker\]'"):
        worker_seam.run_worker({}, drain=True, log_format="text", log_level="INFO",
                               processes=2)


# --- the group's decisions, with fake processes and a clock of our own -----------------

class FakeProc:
    """The part of subprocess.Popen the group uses; ``code`` is set to end it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.code: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)
        self.code = -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int | None:
        return self.code


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_group(tmp_path: Path, n: int = 2, *, drain: bool = False
               ) -> tuple[Group, Clock, list[FakeProc], list[dict[str, Any]]]:
    clock, procs, calls = Clock(), list[FakeProc](), list[dict[str, Any]]()

    def popen(argv: list[str], **kwargs: Any) -> FakeProc:
        calls.append(kwargs)
        procs.append(FakeProc(100 + len(procs)))
        return procs[-1]

    (tmp_path / "metrics").mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    group = Group(n, ["worker"], env, str(tmp_path), drain=drain, grace=10.0, clock=clock,
                  popen=popen)  # type: ignore[arg-type]
    group.start()
    return group, clock, procs, calls


def crash(group: Group, clock: Clock, procs: list[FakeProc], slot: int, code: int = 1,
          after: float = 0.5) -> float:
    """The current process of ``slot`` ends ``after`` s from now; the delay before its
    replacement (inf if none is due)."""
    clock.now += after
    proc = group.children[slot - 1].proc
    assert isinstance(proc, FakeProc)
    proc.code = code
    group.tick()
    child = group.children[slot - 1]
    return child.restart_at - clock.now if child.proc is None and not group.stopping \
        else math.inf


def current(group: Group, slot: int) -> object:
    """The process of ``slot`` now (None between a death and its replacement)."""
    return group.children[slot - 1].proc


def test_children_get_a_process_group_of_their_own(tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to the foreground group: only the supervisor's."""
    _group, _clock, procs, calls = make_group(tmp_path)
    assert len(procs) == 2
    assert all(call["process_group"] == 0 for call in calls)


def test_backoff_doubles_then_resets_after_a_stable_run(tmp_path: Path) -> None:
    group, clock, procs, _ = make_group(tmp_path)
    delays = []
    for _ in range(4):
        delays.append(crash(group, clock, procs, 1))
        group.tick()
        assert group.children[0].proc is None  # not before the delay
        clock.now += delays[-1]
        group.tick()
        assert current(group, 1) is procs[-1]  # replaced when due
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert group.restarts == 4 and not group.stopping
    assert crash(group, clock, procs, 1, after=STABLE_AFTER) == RESTART_FIRST
    assert group.children[0].failures == 1
    assert current(group, 2) is procs[1] and procs[1].signals == []


def test_backoff_is_capped(tmp_path: Path) -> None:
    group, clock, _procs, _ = make_group(tmp_path)
    child = group.children[0]
    child.started = clock.now
    assert [group._backoff(child, clock.now) for _ in range(8)] == [
        1.0, 2.0, 4.0, 8.0, 16.0, RESTART_MAX, RESTART_MAX, RESTART_MAX]


def test_quick_failures_in_a_row_stop_the_group(tmp_path: Path) -> None:
    """A child that keeps dying at once (schema missing...): the group gives up."""
    group, clock, procs, _ = make_group(tmp_path)
    for _ in range(GIVE_UP_AFTER - 1):
        delay = crash(group, clock, procs, 1)
        clock.now += delay
        group.tick()
    assert not group.stopping and group.gave_up is None
    assert crash(group, clock, procs, 1) == math.inf
    assert group.stopping and group.gave_up is not None
    assert f"the {GIVE_UP_AFTER}th time in a row" in group.gave_up
    assert procs[1].signals == [signal.SIGTERM]  # the other one is stopped
    clock.now += 100
    group.tick()
    assert group.children[0].proc is None  # never replaced again
    procs[1].code = -signal.SIGTERM
    group.tick()
    assert group.done() and group.failed == []


def test_a_stable_run_between_failures_does_not_count(tmp_path: Path) -> None:
    group, clock, procs, _ = make_group(tmp_path)
    for i in range(3 * GIVE_UP_AFTER):
        slow = i % (GIVE_UP_AFTER - 1) == 0
        delay = crash(group, clock, procs, 1, after=STABLE_AFTER if slow else 0.5)
        clock.now += delay
        group.tick()
    assert not group.stopping


def test_a_child_that_cannot_be_started_counts_as_a_quick_failure(tmp_path: Path) -> None:
    group, clock, _procs, _ = make_group(tmp_path, 1)

    def broken(argv: list[str], **kwargs: Any) -> FakeProc:
        raise OSError(24, "Too many open files")

    group.popen = broken  # type: ignore[assignment]
    crash(group, clock, _procs, 1)  # 1 quick failure, then GIVE_UP_AFTER - 1 failed starts
    for _ in range(GIVE_UP_AFTER - 1):
        clock.now += 60
        group.tick()
    assert group.stopping and group.gave_up and "could not start" in group.gave_up
    assert group.done()


@pytest.mark.parametrize(("code", "clean"), [
    (0, True), (-signal.SIGTERM, True), (-signal.SIGINT, True), (1, False),
    (-signal.SIGKILL, False), (-signal.SIGSEGV, False)])
def test_exit_status_while_stopping(tmp_path: Path, code: int, clean: bool) -> None:
    group, _clock, procs, _ = make_group(tmp_path)
    group.stop()
    assert [p.signals for p in procs] == [[signal.SIGTERM]] * 2
    procs[0].code, procs[1].code = code, 0
    group.tick()
    assert group.done()
    assert (group.failed == []) is clean
    assert len(procs) == 2  # nothing replaced while stopping


def test_a_child_past_the_grace_is_killed(tmp_path: Path) -> None:
    group, clock, procs, _ = make_group(tmp_path)
    group.stop()
    procs[1].code = 0
    clock.now += 10.0 + KILL_AFTER_GRACE - 0.1
    group.tick()
    assert procs[0].signals == [signal.SIGTERM]
    clock.now += 0.2
    group.tick()
    assert procs[0].signals == [signal.SIGTERM, signal.SIGKILL]
    group.tick()
    assert group.done() and "killed by SIGKILL" in group.failed[0]


def test_drain_finishes_when_every_child_exited_0(tmp_path: Path) -> None:
    group, clock, procs, _ = make_group(tmp_path, drain=True)
    procs[0].code = 0
    group.tick()
    assert group.children[0].finished and not group.done()
    clock.now += 100
    group.tick()
    assert len(procs) == 2  # a finished child is not replaced
    procs[1].code = 0
    group.tick()
    assert group.done() and not group.stopping and group.gave_up is None


def test_drain_a_failed_child_stops_the_group(tmp_path: Path) -> None:
    """--drain with a child that cannot drain (exit 1): no replacement, the group stops."""
    group, clock, procs, _ = make_group(tmp_path, drain=True)
    assert crash(group, clock, procs, 1) == math.inf
    assert group.stopping and group.gave_up and "exit status 1" in group.gave_up
    assert procs[1].signals == [signal.SIGTERM]
    procs[1].code = 1  # the other failed the same way
    group.tick()
    assert group.done() and len(procs) == 2
    assert "exit status 1" in group.failed[0]


CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a worker that does not stop on SIGTERM
from outbox.delivery import supervised
supervised.watch_parent()
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""
PARENT = """
import os, subprocess, sys, time
env = dict(os.environ, OUTBOX_SUPERVISOR_PID=str(os.getpid()),
           OUTBOX_SUPERVISOR_HARD_STOP_SECONDS="0.5")
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def test_a_child_outlives_its_killed_supervisor_by_the_hard_stop_at_most(
        tmp_path: Path) -> None:
    """The supervisor SIGKILLed, a child that ignores the SIGTERM it then gets: it exits
    anyway, ``OUTBOX_SUPERVISOR_HARD_STOP_SECONDS`` after noticing."""
    from tests.support.workers import wait_until

    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(pidfile)])
    child = 0
    try:
        wait_until(pidfile.exists, 60, "the child to start")
        child = int(pidfile.read_text())
        parent.kill()
        parent.wait(10)
        wait_until(lambda: not _alive(child), 30, "the child to exit")
    finally:
        parent.kill()
        parent.wait(10)
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_door_that_cannot_be_served_is_cleaned_up(tmp_path: Path) -> None:
    """serve_unix on a path that cannot be bound: the error, and the runner cleaned up."""
    import asyncio

    from aiohttp import web

    from outbox.delivery import health

    app, cleaned = web.Application(), []

    async def on_cleanup(_app: web.Application) -> None:
        cleaned.append(True)

    app.on_cleanup.append(on_cleanup)
    with pytest.raises(OSError):
        asyncio.run(health.serve_unix(app, str(tmp_path / "missing" / "door.sock")))
    assert cleaned == [True]
