"""A fast webhook sink for the delivery benchmarks: aiohttp in its own process.

:class:`Sink` starts an ``aiohttp.web`` server on 127.0.0.1 (a free port) in a separate
*spawned* process, so its CPU is not taken from the process under test. Every POST is
answered 200 with an empty body; per request it records the arrival time
(``time.time()``) and the ``webhook-id`` header. Signatures are not verified (that would
cost more than the serving). Leaving the ``with`` block stops the server and returns a
:class:`SinkReport`: request counts, distinct ids, duplicates and each id's first arrival.

uvloop is used when it is importable (it is not a project dependency); the report says
which event loop served.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from aiohttp import web

START_TIMEOUT = 30.0
STOP_TIMEOUT = 60.0


@dataclass
class SinkReport:
    """What the sink saw between start and stop."""

    requests: int = 0
    without_id: int = 0
    first_arrival: dict[str, float] = field(default_factory=dict)
    first_request_at: float | None = None
    last_request_at: float | None = None
    cpu_seconds: float = 0.0  # while serving (start-up excluded)
    loop: str = "asyncio"

    @property
    def distinct(self) -> int:
        return len(self.first_arrival)

    @property
    def duplicates(self) -> int:
        """Requests beyond the first for their webhook-id."""
        return self.requests - self.without_id - self.distinct

    def record(self, msg_id: str | None) -> None:
        """One request arrived now, with this ``webhook-id`` (None: without one)."""
        now = time.time()
        self.requests += 1
        if self.first_request_at is None:
            self.first_request_at = now
        self.last_request_at = now
        if msg_id is None:
            self.without_id += 1
        elif msg_id not in self.first_arrival:
            self.first_arrival[msg_id] = now


class _Recorder:
    def __init__(self, loop_name: str) -> None:
        self.report = SinkReport(loop=loop_name)

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()  # consume the body, as a real receiver would
        self.report.record(request.headers.get("webhook-id"))
        if request.path.startswith("/hang"):  # a receiver that never answers (fairness)
            await asyncio.sleep(60)
        if request.path.startswith("/fail"):  # one that answers 500 to everything
            return web.Response(status=500)
        if request.path.startswith("/slow"):  # a real-world receiver: 250 ms (bench.flow)
            await asyncio.sleep(0.25)
        return web.Response(status=200)


async def _serve(conn: Connection, loop_name: str) -> SinkReport:
    recorder = _Recorder(loop_name)
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", recorder.handle)
    # shutdown_timeout: hanging handlers (/hang) are cancelled, not waited for, at stop
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        host, port = runner.addresses[0][:2]
        ready = _cpu_seconds()
        conn.send(f"http://{host}:{port}")
        await stop.wait()
        recorder.report.cpu_seconds = _cpu_seconds() - ready
    finally:
        await runner.cleanup()
    return recorder.report


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(conn: Connection, server: str) -> None:
    """Entry point of the sink process: serve until SIGTERM, then send the report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle

    def serve(loop_name: str) -> Any:
        if server == "raw":
            from bench import rawsink

            return rawsink.serve(conn, SinkReport(loop=f"{loop_name}, raw"), _cpu_seconds)
        return _serve(conn, loop_name)

    try:
        import uvloop

        report = uvloop.run(serve("uvloop"))
    except ImportError:
        report = asyncio.run(serve("asyncio"))
    conn.send(report)
    conn.close()


class Sink:
    """``with Sink() as sink: ... sink.url ...``; afterwards ``sink.report``.

    ``server="raw"``: the minimal server of :mod:`bench.rawsink` (``/slow`` paths and
    plain 200s only) instead of aiohttp's."""

    def __init__(self, *, server: str = "aiohttp") -> None:
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=_child, args=(child_conn, server),
                                 name="bench-sink", daemon=True)
        self.url = ""
        self.report = SinkReport()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def __enter__(self) -> Sink:
        self._proc.start()
        try:
            self.url = str(self._recv(START_TIMEOUT, "start"))
        except BaseException:
            self._kill()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        graceful = exc_type is None and self._proc.is_alive()
        try:
            if graceful:
                self._proc.terminate()  # SIGTERM: the child stops serving and reports
                report = self._recv(STOP_TIMEOUT, "stop")
                if isinstance(report, SinkReport):
                    self.report = report
        finally:
            self._kill(grace=5.0 if graceful else 0.0)

    def _recv(self, timeout: float, what: str) -> Any:
        if not self._conn.poll(timeout):
            raise TimeoutError(f"sink did not {what} within {timeout:.0f}s")
        try:
            return self._conn.recv()
        except EOFError:
            raise RuntimeError(f"sink process exited during {what}"
                               f" (status {self._proc.exitcode})") from None

    def _kill(self, grace: float = 0.0) -> None:
        """Wait up to ``grace`` seconds for the child to exit, then SIGKILL it."""
        self._proc.join(grace)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()
