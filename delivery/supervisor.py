"""``outbox worker --processes N``: one supervisor, N delivery processes, one side door.

Guarantees:

- Each child is ``python -m outbox worker --processes 1``, the ordinary single-process
  worker (its own pool, claims, grace period), with the supervisor's environment and
  settings: every guarantee of :mod:`outbox.delivery.worker` holds per child.
- Each child runs in a process group of its own: a terminal's Ctrl-C (SIGINT to the
  foreground group) reaches the supervisor only, which stops the children as below.
- A child that exits while the group runs (crash, out of memory, SIGKILL, or a clean exit
  nobody asked for) is logged and replaced after a backoff: 1 s, doubling (2, 4, 8 s;
  never over 30 s) while replacements keep dying within ``STABLE_AFTER`` (a minute) of
  their start. At the ``GIVE_UP_AFTER``-th (5th) such quick failure in a row of one
  process (a setting, schema or dependency that is wrong for every process), the
  supervisor gives up: it stops the group as below and raises :class:`WorkerGroupFailed`
  (exit status 1), so that systemd or Kubernetes see the failure.
- With ``--drain`` a child that exits 0 has finished and is not replaced; one that fails
  is not replaced either: the group stops as below and :class:`WorkerGroupFailed` names
  it (the child logged its own error before exiting).
- SIGTERM or SIGINT: no more replacements; SIGTERM to every child, each of which stops
  claiming and gives in-flight requests ``OUTBOX_SHUTDOWN_GRACE_SECONDS``. A child still
  running ``KILL_AFTER_GRACE`` seconds after that is SIGKILLed (its claims come back after
  their lease). The supervisor returns when every child has exited, and raises
  :class:`WorkerGroupFailed` (exit status 1) unless every one exited 0 (or was ended by
  that SIGTERM while still starting, before it could claim anything).
- A SIGKILLed supervisor: the kernel sends each child SIGTERM (``PR_SET_PDEATHSIG``; see
  :mod:`outbox.delivery.supervised`) and each child drains as above. A child still
  running ``KILL_AFTER_GRACE`` seconds past its grace after that exits at once (status
  1, its claims come back after their lease): none outlives its supervisor by more.
- One ``/metrics``, ``/healthz``, ``/readyz`` for the group on ``OUTBOX_METRICS_PORT`` (not
  with ``--drain``, like one worker; a taken port as in :mod:`outbox.delivery.health`,
  found before any child starts).
  The children run in prometheus_client's multiprocess mode with
  ``PROMETHEUS_MULTIPROC_DIR`` in a private temporary directory, removed when the
  supervisor exits (see :mod:`outbox.delivery.metrics` for how each metric adds up; a
  replaced child's counts stay in the totals). ``/healthz``: 200 while every child process
  runs. ``/readyz``: 200 while every child answers its own ``/readyz`` (served on a Unix
  socket in that directory) with 200.
- The counters returned (printed by ``outbox worker`` at exit) are summed over the
  children that exited by themselves; a SIGKILLed child's are in ``/metrics`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only what starting the children needs: aiohttp and prometheus_client are imported after
# they started (and the worker itself never), so a group starts about as fast as separate
# processes.
from outbox.delivery import supervised
from outbox.errors import OutboxError

if TYPE_CHECKING:
    from aiohttp import web
    from prometheus_client.registry import Collector

    from outbox.delivery.settings import WorkerSettings

log = logging.getLogger("outbox.supervisor")

RESTART_FIRST = 1.0  # seconds before replacing a child that died
RESTART_MAX = 30.0
STABLE_AFTER = 60.0  # a child that ran this long resets the backoff
GIVE_UP_AFTER = 5  # quick failures in a row (each within STABLE_AFTER): the group stops
KILL_AFTER_GRACE = 15.0  # past OUTBOX_SHUTDOWN_GRACE_SECONDS: SIGKILL
TICK = 0.5  # how often the supervisor looks at its children, besides at each SIGCHLD


class WorkerGroupFailed(OutboxError):
    """Some child of ``outbox worker --processes N`` did not stop cleanly."""


def child_env(overrides: Mapping[str, Any], directory: str, *, grace: float = 0.0
              ) -> dict[str, str]:
    """The children's environment: this one, the option values as ``OUTBOX_*`` variables,
    one process each, no TCP door of their own, the private directory, and how long a
    child may run on once its supervisor is gone (``grace + KILL_AFTER_GRACE``)."""
    env = dict(os.environ)
    for key, value in overrides.items():
        name = "SCHEMA" if key == "schema_name" else key.upper()
        env[f"OUTBOX_{name}"] = str(value)
    metrics = os.path.join(directory, "metrics")
    env.update({"OUTBOX_PROCESSES": "1", "OUTBOX_METRICS_PORT": "0",
                supervised.SUPERVISOR_DIR_ENV: directory, "PROMETHEUS_MULTIPROC_DIR": metrics,
                supervised.PARENT_ENV: str(os.getpid()),
                supervised.HARD_STOP_ENV: str(grace + KILL_AFTER_GRACE)})
    return env


def child_argv(*, drain: bool, log_format: str, log_level: str) -> list[str]:
    return [sys.executable, "-m", "outbox", "worker", "--processes", "1",
            "--log-format", log_format, "--log-level", log_level,
            *(["--drain"] if drain else [])]


def _status(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


@dataclass
class Child:
    """One slot of the group: its current process, if any, and its restart backoff."""

    slot: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    failures: int = 0  # exits in a row, each within STABLE_AFTER of its start
    restart_at: float = 0.0
    finished: bool = False  # --drain: exited 0
    killed: bool = False


class Group:
    """N children, kept running until :meth:`stop` (or, draining, until all finished)."""

    def __init__(self, n: int, argv: list[str], env: dict[str, str], directory: str, *,
                 drain: bool, grace: float,
                 clock: Callable[[], float] = time.monotonic,
                 popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen) -> None:
        self.children = [Child(slot) for slot in range(1, n + 1)]
        self.argv, self.env, self.directory = argv, env, directory
        self.metrics_dir = env["PROMETHEUS_MULTIPROC_DIR"]
        self.drain, self.grace = drain, grace
        self.stopping = False
        self.kill_at = math.inf
        self.failed: list[str] = []
        self.gave_up: str | None = None  # why the group stopped by itself, if it did
        self.clock, self.popen = clock, popen
        self.totals: dict[str, int] = {}
        self.restarts = 0

    def live(self) -> list[tuple[Child, subprocess.Popen[bytes]]]:
        return [(c, c.proc) for c in self.children if c.proc is not None]

    def stop(self) -> None:
        """No more replacements; SIGTERM to every child (they drain within the grace)."""
        if self.stopping:
            return
        self.stopping = True
        self.kill_at = self.clock() + self.grace + KILL_AFTER_GRACE
        log.info("stopping: SIGTERM to %d worker processes", len(self.live()))
        for _child, proc in self.live():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    def start(self) -> None:
        for child in self.children:
            if not self.stopping:
                self._spawn(child)

    async def run(self) -> None:
        """Watch the children until the group is done: at once when one exits (SIGCHLD),
        and every TICK for the restart and kill deadlines."""
        loop, wake = asyncio.get_running_loop(), asyncio.Event()
        loop.add_signal_handler(signal.SIGCHLD, wake.set)
        try:
            while not self.done():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK):
                        await wake.wait()
                wake.clear()
                self.tick()
        finally:
            loop.remove_signal_handler(signal.SIGCHLD)

    def done(self) -> bool:
        if any(c.proc is not None for c in self.children):
            return False
        return self.stopping or all(c.finished for c in self.children)

    def tick(self) -> None:
        now = self.clock()
        for child in self.children:
            if child.proc is not None and (code := child.proc.poll()) is not None:
                self._reaped(child, child.proc.pid, code, now)
            if child.proc is None and not (child.finished or self.stopping) \
                    and now >= child.restart_at:
                self._spawn(child)
        if now >= self.kill_at:
            for child, proc in self.live():
                if not child.killed:
                    log.error("worker process %d (pid %d) still running %.0fs after"
                              " SIGTERM: killing it", child.slot, proc.pid,
                              self.grace + KILL_AFTER_GRACE)
                    child.killed = True
                    proc.kill()

    def _spawn(self, child: Child) -> None:
        child.started = self.clock()
        try:
            # a process group of its own: a terminal's Ctrl-C reaches the supervisor only
            child.proc = self.popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                    process_group=0)
        except OSError as exc:
            what = f"worker process {child.slot} could not start ({exc})"
            if not self._give_up(child, child.started, what):
                delay = self._backoff(child, child.started)
                log.error("%s: trying again in %.0fs", what, delay)
            return
        log.info("started worker process %d (pid %d)", child.slot, child.proc.pid)

    def _reaped(self, child: Child, pid: int, code: int, now: float) -> None:
        from prometheus_client.multiprocess import mark_process_dead

        child.proc = None
        mark_process_dead(pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(supervised.child_socket(self.directory, pid))
        self._collect_stats(pid)
        if self.stopping:
            # killed by SIGTERM (SIGINT: Ctrl-C): it had no handler yet (still starting,
            # nothing claimed) or no more (everything recorded): a clean stop either way
            if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                self.failed.append(f"worker process {child.slot} (pid {pid}): {_status(code)}")
            return
        what = (f"worker process {child.slot} (pid {pid}) ended ({_status(code)}) after"
                f" {now - child.started:.0f}s")
        if self.drain:
            if code == 0:
                child.finished = True
            else:  # it cannot drain: another would fail the same way
                self._fail(f"{what}: see its error above")
            return
        if self._give_up(child, now, what):
            return
        delay = self._backoff(child, now)
        self.restarts += 1
        log.warning("%s: starting another in %.0fs", what, delay)

    def _give_up(self, child: Child, now: float, what: str) -> bool:
        """Count a failure of ``child``; past GIVE_UP_AFTER quick ones in a row, stop the
        group (True)."""
        if now - child.started >= STABLE_AFTER:
            child.failures = 0
        if child.failures + 1 < GIVE_UP_AFTER:
            return False
        self._fail(f"{what}, the {GIVE_UP_AFTER}th time in a row within"
                   f" {STABLE_AFTER:.0f}s of its start: giving up (see its error above)")
        return True

    def _fail(self, why: str) -> None:
        """Stop the group because of ``why``; :func:`run` raises WorkerGroupFailed."""
        log.error("%s: stopping", why)
        self.gave_up = self.gave_up or why
        self.stop()

    def _backoff(self, child: Child, now: float) -> float:
        """The delay before ``child`` runs again (from ``now``, when it ended)."""
        if now - child.started >= STABLE_AFTER:
            child.failures = 0
        delay = min(RESTART_MAX, RESTART_FIRST * (1 << min(child.failures, 16)))
        child.failures += 1
        child.restart_at = now + delay
        return delay

    def _collect_stats(self, pid: int) -> None:
        path = Path(self.directory, f"{pid}.json")
        with contextlib.suppress(OSError, ValueError):
            for key, value in json.loads(path.read_text()).items():
                self.totals[key] = self.totals.get(key, 0) + int(value)
            path.unlink()

    def collector(self) -> Collector:
        """The supervisor's own series: processes running, processes replaced."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        group = self

        class Own:
            def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
                yield GaugeMetricFamily("outbox_worker_processes", "Worker processes running",
                                        value=len(group.live()))
                yield CounterMetricFamily("outbox_worker_restarts", "Worker processes replaced",
                                          value=group.restarts)

        return Own()

    async def healthz(self) -> tuple[bool, str]:
        running, n = len(self.live()), len(self.children)
        if running < n:
            return False, f"{running} of {n} worker processes running"
        return True, "ok"

    async def readyz(self) -> tuple[bool, str]:
        if self.stopping:
            return False, "stopping"
        live = self.live()
        if len(live) < len(self.children):
            return False, f"{len(live)} of {len(self.children)} worker processes running"
        answers = await asyncio.gather(*(
            _ask(supervised.child_socket(self.directory, proc.pid), "/readyz")
            for _child, proc in live))
        bad = [f"process {child.slot}: {why}"
               for (child, _proc), (ok, why) in zip(live, answers, strict=True) if not ok]
        return (False, "; ".join(bad)) if bad else (True, "ready")

    def terminate(self) -> None:
        """Last resort (the supervisor itself failed): stop the children, wait, kill."""
        if not self.live():
            return
        self.stop()
        for _child, proc in self.live():
            try:
                proc.wait(max(0.0, self.kill_at - self.clock()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _ask(path: str, page: str) -> tuple[bool, str]:
    """GET ``page`` of a child's door on the Unix socket ``path``: (200?, its text)."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path),
                                         timeout=aiohttp.ClientTimeout(total=2.0)) as session, \
                session.get(f"http://worker{page}") as answer:
            return answer.status == 200, (await answer.text()).strip()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False, "starting" if not os.path.exists(path) else "not answering"


async def _supervise(group: Group, settings: WorkerSettings) -> None:
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, group.stop)
    server = None
    try:
        if settings.metrics_port and not group.drain:  # a taken port: no child started
            server = await _serve(group, settings)
        group.start()
        await group.run()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if server is not None:
            await server.cleanup()


async def _serve(group: Group, settings: WorkerSettings) -> web.AppRunner | None:
    """The group's door: every child's metrics (multiprocess mode), and the supervisor's."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    from outbox.delivery import health

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=group.metrics_dir)  # type: ignore[no-untyped-call]
    registry.register(group.collector())
    app = health.make_group_app(lambda: generate_latest(registry), group.healthz,
                                group.readyz)
    return await health.listen(app, settings)


def run(settings: WorkerSettings, n: int, *, overrides: Mapping[str, Any], drain: bool,
        log_format: str, log_level: str) -> dict[str, int]:
    """Run ``n`` worker processes until SIGTERM/SIGINT (or, with ``drain``, until each
    has drained); the children's summed counters, or :class:`WorkerGroupFailed`."""
    directory = tempfile.mkdtemp(prefix="outbox-workers-")
    try:
        env = child_env(overrides, directory, grace=settings.shutdown_grace_seconds)
        os.mkdir(env["PROMETHEUS_MULTIPROC_DIR"])
        group = Group(n, child_argv(drain=drain, log_format=log_format, log_level=log_level),
                      env, directory, drain=drain, grace=settings.shutdown_grace_seconds)
        log.info("supervising %d worker processes%s", n, " (draining)" if drain else "")
        try:
            asyncio.run(_supervise(group, settings))
        finally:
            group.terminate()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if group.gave_up:
        raise WorkerGroupFailed("; ".join([group.gave_up, *group.failed]))
    if group.failed:
        raise WorkerGroupFailed("not every worker process stopped cleanly: "
                                + "; ".join(group.failed))
    return group.totals
