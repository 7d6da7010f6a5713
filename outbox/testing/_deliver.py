"""Deliver what is due, in this process: :func:`deliver_due`, through :mod:`outbox.worker`
(imported when called, so the plugin loads without the ``worker`` extra)."""

from __future__ import annotations

from typing import Any

__all__ = ["deliver_due"]

# A test's worker: deliver to receivers on loopback, give up fast on a silent one, and
# serve no metrics port; any of these can be overridden.
_TEST_DEFAULTS: dict[str, Any] = {
    "allow_networks": "127.0.0.0/8,::1/128",
    "http_timeout_seconds": 5.0,
    "lease_seconds": 30.0,
    "metrics_port": 0,
    "poll_interval_seconds": 0.05,
}


def deliver_due(database_url: str, *, schema: str = "outbox",
                **settings: Any) -> dict[str, int]:
    """Run the real delivery worker in this process until nothing is due; its counters
    (``claimed``, ``delivered``, ``retry``, ``dead``, ``fenced``).

    Every delivery due when it starts is attempted, and so is every one that comes due
    before the worker finds nothing due (the next event of an ordered key, a retry whose
    backoff has ended); each outcome is committed as ``outbox worker`` commits it:
    delivered, dead, or a retry scheduled at its backoff (one not yet due is left for a
    later call). ``settings`` are worker settings (``OUTBOX_*`` names in lower case, e.g.
    ``max_attempts=1``) on top of the environment and of test defaults (loopback receivers
    allowed, 5 s HTTP timeout, no metrics port).

    An unknown or invalid setting is a :class:`~outbox.errors.ConfigurationError` before
    anything runs; so is a missing ``worker`` extra (naming it). It runs its own event loop:
    call it from synchronous code (from a coroutine, ``await asyncio.to_thread(deliver_due,
    ...)``)."""
    from outbox import worker

    overrides = {**_TEST_DEFAULTS, **settings, "database_url": database_url,
                 "schema_name": schema}
    return worker.drain(overrides, "deliver_due")
