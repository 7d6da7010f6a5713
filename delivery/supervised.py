"""The supervised side of ``outbox worker --processes N`` (:mod:`outbox.delivery.supervisor`),
and the names both sides share. Every function here does nothing in a worker that no
supervisor started (its environment has no ``OUTBOX_SUPERVISOR_PID``/``_DIR``).

- :func:`watch_parent`: the child gets SIGTERM (and so drains) when its supervisor dies,
  even by SIGKILL: ``PR_SET_PDEATHSIG`` on Linux, else a thread checking ``getppid()``
  every second. A child still running ``OUTBOX_SUPERVISOR_HARD_STOP_SECONDS`` (set by the
  supervisor: grace + its kill delay) after noticing that exits at once, status 1
  (``os._exit``: no cleanup; its claims come back after their lease). A supervisor
  already gone when the child starts: it exits at once.
- :func:`report_stats`: the child's exit counters, left in the private directory for the
  supervisor to add up (written to a temporary name, then renamed: never read half).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("outbox.supervisor")

PARENT_ENV = "OUTBOX_SUPERVISOR_PID"
# The private directory, in the children's environment: each serves its door on the socket
# ``child_socket(directory, its pid)`` (outbox.delivery.health) and leaves its counters.
SUPERVISOR_DIR_ENV = "OUTBOX_SUPERVISOR_DIR"
# Seconds a child may run on after its supervisor died, before it exits regardless.
HARD_STOP_ENV = "OUTBOX_SUPERVISOR_HARD_STOP_SECONDS"
PARENT_POLL = 1.0  # seconds between two looks at getppid()
_PR_SET_PDEATHSIG = 1


def child_socket(directory: str, pid: int) -> str:
    """The Unix socket a supervised child with ``pid`` serves its door on."""
    return os.path.join(directory, f"{pid}.sock")


def watch_parent() -> None:
    """In a child of a supervisor (else nothing): SIGTERM to this process when the
    supervisor dies, a hard exit ``HARD_STOP_ENV`` seconds later; exits at once if it is
    already gone."""
    raw = os.environ.get(PARENT_ENV)
    if not raw:
        return
    parent = int(raw)
    hard_stop = os.environ.get(HARD_STOP_ENV)
    signalled = _parent_death_signal(signal.SIGTERM)
    threading.Thread(target=_watch_parent, daemon=True, name="outbox-parent-watch",
                     args=(parent, not signalled, float(hard_stop) if hard_stop else None)
                     ).start()
    if os.getppid() != parent:
        log.warning("supervisor %d is gone: exiting", parent)
        raise SystemExit(0)


def _parent_death_signal(sig: signal.Signals) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, send_sigterm: bool, hard_stop: float | None) -> None:
    """Once ``parent`` is gone: SIGTERM (unless the kernel sent it), then ``hard_stop``
    seconds to finish before ``os._exit(1)``."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    if send_sigterm:
        os.kill(os.getpid(), signal.SIGTERM)
    if hard_stop is None:
        return
    time.sleep(hard_stop)
    log.error("supervisor %d died %.0fs ago and this worker process is still running:"
              " exiting now", parent, hard_stop)
    os._exit(1)


def report_stats(stats: Mapping[str, int]) -> None:
    """In a child of a supervisor (else nothing): leave the exit counters for it."""
    directory = os.environ.get(SUPERVISOR_DIR_ENV)
    if directory:
        path = Path(directory, f"{os.getpid()}.json")
        path.with_suffix(".tmp").write_text(json.dumps(dict(stats)))
        path.with_suffix(".tmp").replace(path)
