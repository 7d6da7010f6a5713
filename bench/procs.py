"""Processes for the delivery benchmark: ``outbox worker`` subprocesses and CPU accounting.

:class:`Workers` starts ``python -m outbox worker`` processes (or another command, such as
``bench.bareloop``) on a database and kills whatever is still running when its ``with``
block ends, error or not. :func:`cpu_times` and :class:`CpuMeter` read ``/proc`` to say
how many CPU seconds each kind of process (workers, sink, PostgreSQL, ...) used over a
measurement; :func:`children_cpu` is this process's reaped children's own rusage, exact
for processes that ran to their end (``--drain`` workers).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.common import SCHEMA

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


class Workers:
    """``python -m outbox worker`` processes; killed on exit from the ``with`` block."""

    def __init__(self, url: str, k: int, env: dict[str, str], *, drain: bool,
                 cmd: list[str] | None = None, cwd: Path | None = None) -> None:
        self.env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA,
                    "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8",
                    "OUTBOX_METRICS_PORT": "0",  # no side door: K workers share one host
                    **env}
        self.cmd = cmd or [sys.executable, "-m", "outbox", "worker",
                           *(["--drain"] if drain else [])]
        self.k = k
        self.cwd = cwd or ROOT  # another checkout's tree runs its own outbox (python -m)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []

    def __enter__(self) -> Workers:
        try:
            for _ in range(self.k):
                self.logs.append(tempfile.TemporaryFile())
                self.procs.append(subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd,
                                                   stdout=subprocess.DEVNULL,
                                                   stderr=self.logs[-1]))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
            for p in self.procs:
                p.wait(30)
        finally:
            for log in self.logs:
                log.close()

    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def check(self) -> bool:
        """True while any worker runs; raises (with its log's tail) if one failed."""
        for p, log in zip(self.procs, self.logs, strict=True):
            if p.poll() not in (None, 0):
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"worker {p.pid} exited with status {p.returncode}:\n{tail}")
        return any(p.poll() is None for p in self.procs)

    def counters(self) -> dict[str, int]:
        """The workers' exit counters summed (each prints ``claimed=N delivered=N ...``
        last on stderr); call after :meth:`wait`."""
        total: dict[str, int] = {}
        for log in self.logs:
            log.seek(0)
            lines = [ln for ln in log.read().decode(errors="replace").splitlines()
                     if ln.startswith("claimed=")]
            for item in lines[-1].split() if lines else ():
                key, _, value = item.partition("=")
                if value.isdigit():
                    total[key] = total.get(key, 0) + int(value)
        return total

    def wait(self, timeout: float = 30.0, *, terminate: bool = False) -> None:
        """Wait for every worker to exit (after SIGTERM if ``terminate``); 0 or raise."""
        if terminate:
            for p in self.procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        for p in self.procs:
            p.wait(timeout)
        self.check()


def children_cpu() -> float:
    """User + system CPU seconds of this process's children that have exited and been
    waited for (``RUSAGE_CHILDREN``): the difference around a :class:`Workers` block that
    ends with :meth:`Workers.wait` is exactly those workers' CPU, start-up included, as
    long as no other child of this process is reaped meanwhile."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class CpuTimes:
    """CPU seconds by pid (with the process name), and the machine's busy and total."""

    procs: dict[int, tuple[str, float]]
    busy: float
    total: float


def cpu_times() -> CpuTimes:
    """One sample of every process's CPU time and the machine's."""
    procs: dict[int, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                raw = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue  # exited meanwhile
            name = raw[raw.index(b"(") + 1: raw.rindex(b")")].decode(errors="replace")
            fields = raw[raw.rindex(b")") + 2:].split()  # fields[11:13]: utime, stime
            procs[int(entry.name)] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal
    return CpuTimes(procs, (total - ticks[3] - ticks[4]) / _TICK, total / _TICK)


class CpuMeter:
    """CPU seconds used since creation, by role, from repeated ``/proc`` samples.

    Call :meth:`sample` now and then (and last just before :meth:`split`): a process that
    exits between samples keeps its last sampled time, so only its final moments are
    missed. ``pg_db`` is the backends of the database under test, as reported to
    :meth:`sample` (from ``pg_stat_activity``); ``pg_other`` is any other process named
    ``postgres`` (WAL writer, checkpointer, other databases) and ``other`` the rest.
    """

    def __init__(self) -> None:
        self.first = self.latest = cpu_times()
        self.seen = dict(self.first.procs)
        self.db_backends: set[int] = set()

    def sample(self, db_backends: Iterable[int] = ()) -> None:
        self.latest = cpu_times()
        self.seen.update(self.latest.procs)
        self.db_backends.update(db_backends)

    def split(self, roles: dict[str, set[int]]) -> dict[str, float]:
        """Seconds per role (each a set of pids), and the machine's busy fraction."""
        roles = {**roles, "pg_db": self.db_backends}
        out = dict.fromkeys([*roles, "pg_other", "other"], 0.0)
        for pid, (name, cpu) in self.seen.items():
            used = cpu - self.first.procs.get(pid, (name, 0.0))[1]
            role = next((r for r, pids in roles.items() if pid in pids),
                        "pg_other" if name == "postgres" else "other")
            out[role] += used
        busy, total = self.latest.busy - self.first.busy, self.latest.total - self.first.total
        out["machine_busy_fraction"] = busy / max(total, 1e-9)
        return {k: round(v, 3) for k, v in out.items()}
