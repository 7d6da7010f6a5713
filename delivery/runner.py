"""Process-level wiring for ``outbox worker``: HTTP client, signals, the loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import Iterable, Iterator

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
    settings: WorkerSettings, *, drain: bool = False, signals: Iterable[signal.Signals] = (),
    tune_gc: bool = False,
) -> dict[str, int]:
    """Run one worker until stopped (by a signal in ``signals``) or drained; its counters.

    Serves /metrics, /healthz and /readyz where :func:`outbox.delivery.health.start` says.
    ``tune_gc``: the process is the worker's own (``outbox worker``): its garbage collector
    is tuned for the run (:func:`_tuned_gc`), and put back as it was after it.
    """
    async with make_worker_transport(settings) as transport:
        worker = Worker(settings, transport)
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, worker.stop)
        server = await health.start(settings, worker.metrics.registry, worker.ready,
                                    drain=drain)
        try:
            with _tuned_gc() if tune_gc else contextlib.nullcontext():
                await worker.run(drain=drain)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            if server is not None:
                await server.cleanup()
    return worker.stats


# The cyclic garbage collector's first threshold (allocations less deallocations between
# young collections) while a worker runs; Python's default is 700.
GC_YOUNG_THRESHOLD = 10_000


@contextlib.contextmanager
def _tuned_gc() -> Iterator[None]:
    """Collect, then freeze what exists at the worker's start (modules, settings, the
    worker) out of the collector's sight, and collect the young generation every 10,000
    net allocations instead of 700; unfrozen and the thresholds put back afterwards. A
    busy worker allocates a few hundred objects per delivery (requests, futures,
    headers): with 1,000 requests in flight the collector took 6.6% of its CPU (py-spy),
    and this cut the worker's CPU per delivery by about a tenth (bench.flow slow, against
    the sink's and the database's CPU in the same runs). Cycles made during the run are
    still collected; at most that many more young objects wait for it."""
    gc.collect()
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
