"""The worker's HTTP side door: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process's event loop runs (liveness).
``/readyz`` answers 200 only while the database answered the last call and the worker is
not stopping (readiness: take a draining or cut-off worker out of rotation).
``/metrics`` is the Prometheus text format of the worker's own registry.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def make_app(registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> web.Application:
    async def metrics(_request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        ok, why = ready()
        return web.Response(text=f"{why}\n", status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def serve(app: web.Application, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    """Start serving ``app``; the caller cleans up with ``await runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
