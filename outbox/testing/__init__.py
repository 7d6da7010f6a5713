"""outbox.testing: what an application's own test suite needs to test code that emits.

Installed with outbox, it is also a pytest plugin (``outbox.testing.plugin``, registered
through the ``pytest11`` entry point: no ``conftest.py`` line needed) whose fixtures give
each test a fresh migrated database and a real webhook receiver. Guide:
docs/guides/testing.md.

- :func:`captured_events`: which events a block of code emitted (none if it rolled back).
- :func:`deliver_due`: run the real delivery worker in-process until nothing is due.
- :class:`Receiver` (:mod:`outbox.testing.receiver`): a real HTTP receiver on 127.0.0.1
  that verifies Standard Webhooks signatures and records every request as a
  :class:`Received`; ``python -m outbox.testing.receiver`` runs one standalone.
- :mod:`outbox.testing.postgres`: find or start a PostgreSQL, make and drop throwaway
  databases (:func:`create_template`, :func:`create_database`, :func:`drop_database`).

Importing it imports neither pytest nor the worker's dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outbox.testing._deliver import deliver_due
    from outbox.testing.events import CapturedEvent, CapturedEvents, captured_events
    from outbox.testing.postgres import (
        TempCluster,
        create_database,
        create_template,
        drop_database,
        find_or_start,
    )
    from outbox.testing.receiver import Behaviour, Received, Receiver

# Each name is imported from its module on first use, so that ``python -m
# outbox.testing.receiver`` does not find its own module imported already.
_HOME = {
    "deliver_due": "outbox.testing._deliver",
    **dict.fromkeys(["CapturedEvent", "CapturedEvents", "captured_events"],
                    "outbox.testing.events"),
    **dict.fromkeys(["TempCluster", "create_database", "create_template", "drop_database",
                     "find_or_start"], "outbox.testing.postgres"),
    **dict.fromkeys(["Behaviour", "Received", "Receiver"], "outbox.testing.receiver"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'outbox.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Behaviour",
    "CapturedEvent",
    "CapturedEvents",
    "Received",
    "Receiver",
    "TempCluster",
    "captured_events",
    "create_database",
    "create_template",
    "deliver_due",
    "drop_database",
    "find_or_start",
]
