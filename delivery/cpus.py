"""How many worker processes ``outbox worker --processes auto`` starts: the CPUs this
process may use (its affinity mask, capped by a cgroup v2 CPU quota, as in a container
with ``--cpus``)."""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cpus"]


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by a cgroup CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux, or the call is filtered
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpus()
    return max(1, min(cpus, quota) if quota else cpus)


def _cgroup_cpus(membership: Path = Path("/proc/self/cgroup"),
                 root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """CPUs allowed by this process's cgroup v2 ``cpu.max`` (rounded up), if limited."""
    try:
        line = membership.read_text().splitlines()[0]
        own = root / line.split("::", 1)[1].lstrip("/")
        for path in (own / "cpu.max", root / "cpu.max"):
            if path.exists():
                quota, period = path.read_text().split()[:2]
                return None if quota == "max" else math.ceil(int(quota) / int(period))
    except (OSError, IndexError, ValueError):
        return None
    return None
