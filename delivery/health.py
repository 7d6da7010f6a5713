"""The worker's HTTP side door: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers 200 while the process's event loop runs (liveness).
``/readyz`` answers 200 only while the database answered the last call and the worker is
not stopping (readiness: take a draining or cut-off worker out of rotation).
``/metrics`` is the Prometheus text format of the worker's own registry.

Where it is served (:func:`start`): nowhere with ``--drain`` or ``OUTBOX_METRICS_PORT=0``;
on a Unix socket in the supervisor's private directory for a child of ``outbox worker
--processes N`` (the supervisor serves the group's door, :mod:`outbox.delivery.supervisor`);
else on ``OUTBOX_METRICS_HOST:OUTBOX_METRICS_PORT``. A port that is taken is an error
(:class:`~outbox.errors.ConfigurationError`, the process does not start) when the port was
set (``OUTBOX_METRICS_PORT`` or ``--metrics-port``); the default port (9464) taken, as by
another worker on the same host, is one warning line and the worker runs without the door.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from outbox.delivery.settings import WorkerSettings
from outbox.delivery.supervised import SUPERVISOR_DIR_ENV, child_socket
from outbox.errors import ConfigurationError

log = logging.getLogger("outbox.worker")

Check = Callable[[], Awaitable[tuple[bool, str]]]


def make_app(registry: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> web.Application:
    """One worker's door: its registry, alive while the loop runs, ``ready()``."""

    async def alive() -> tuple[bool, str]:
        return True, "ok"

    async def readiness() -> tuple[bool, str]:
        return ready()

    return make_group_app(lambda: generate_latest(registry), alive, readiness)


def make_group_app(metrics: Callable[[], bytes], healthz: Check, readyz: Check
                   ) -> web.Application:
    """A door whose answers come from the given functions (200 if True, else 503)."""

    async def metrics_page(_request: web.Request) -> web.Response:
        return web.Response(body=metrics(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def page(check: Check) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(_request: web.Request) -> web.Response:
            ok, why = await check()
            return web.Response(text=f"{why}\n", status=200 if ok else 503)

        return answer

    app = web.Application()
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/healthz", page(healthz))
    app.router.add_get("/readyz", page(readyz))
    return app


async def serve(app: web.Application, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    """Start serving ``app``; the caller cleans up with ``await runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def serve_unix(app: web.Application, path: str) -> web.AppRunner:
    """Start serving ``app`` on the Unix socket ``path``; the caller cleans up with
    ``await runner.cleanup()`` (done here if it cannot be served)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.UnixSite(runner, path).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def listen(app: web.Application, settings: WorkerSettings) -> web.AppRunner | None:
    """Serve ``app`` on the configured host and port; None if the *default* port is taken
    (logged once); ConfigurationError if a port that was set cannot be served."""
    host, port = settings.metrics_host, settings.metrics_port
    try:
        return await serve(app, port, host)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and "metrics_port" not in settings.model_fields_set:
            log.warning("metrics port %d on %s is in use (another outbox worker on this"
                        " host?): running without /metrics, /healthz and /readyz; set"
                        " OUTBOX_METRICS_PORT (or --metrics-port) to serve them, or run one"
                        " `outbox worker --processes N`", port, host)
            return None
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror}): set"
            " OUTBOX_METRICS_PORT to a free port, or 0 to disable /metrics, /healthz and"
            " /readyz") from None


async def start(settings: WorkerSettings, registry: CollectorRegistry,
                ready: Callable[[], tuple[bool, str]], *, drain: bool) -> web.AppRunner | None:
    """One worker's door where the settings say (see the module docstring), or None."""
    if drain:
        return None
    supervisor_dir = os.environ.get(SUPERVISOR_DIR_ENV)
    if supervisor_dir:
        return await serve_unix(make_app(registry, ready),
                                child_socket(supervisor_dir, os.getpid()))
    if not settings.metrics_port:
        return None
    return await listen(make_app(registry, ready), settings)
