"""Process-level wiring for ``outbox worker``: HTTP client, signals, the loop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterable

from outbox._security.ssrf import parse_networks
from outbox.delivery import health
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.sender import Transport, make_transport
from outbox.delivery.settings import WorkerSettings
from outbox.delivery.worker import Worker


def make_worker_transport(settings: WorkerSettings) -> Transport:
    """The worker's HTTP transport, guarded by the SSRF resolver with the configured allowlist."""
    resolver = GuardedResolver(parse_networks(settings.allow_networks),
                               timeout=settings.connect_timeout_seconds)
    return make_transport(max_connections=settings.concurrency, resolver=resolver)


async def run_worker(
    settings: WorkerSettings, *, drain: bool = False, signals: Iterable[signal.Signals] = ()
) -> dict[str, int]:
    """Run one worker until stopped (by a signal in ``signals``) or drained; its counters.

    Serves /metrics, /healthz and /readyz where :func:`outbox.delivery.health.start` says.
    """
    async with make_worker_transport(settings) as transport:
        worker = Worker(settings, transport)
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, worker.stop)
        server = await health.start(settings, worker.metrics.registry, worker.ready,
                                    drain=drain)
        try:
            await worker.run(drain=drain)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            if server is not None:
                await server.cleanup()
    return worker.stats
