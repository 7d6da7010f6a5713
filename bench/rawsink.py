"""The sink's minimal server (``Sink(server="raw")``): one asyncio ``Protocol`` per
connection, requests parsed by ``httptools`` (the parser the worker's client uses), each
answered 200 with an empty body on the same keep-alive connection: after 250 ms for a
path under ``/slow``, at once otherwise (``/hang`` and ``/fail`` are the aiohttp sink's:
answered 404 here).

It records what the aiohttp sink records (arrivals, ``webhook-id``s) for a fraction of its
CPU per request, so that a bench whose receiver shares the machine's two cores with the
workers (``bench.flow slow``: 1,000 endpoints answering after 250 ms) spends less of
them on the receiver. Bodies are read and dropped; signatures are not verified.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import httptools

_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
SLOW_SECONDS = 0.25


class _Request(asyncio.Protocol):
    """One connection. A client that sends its next request only after the answer (the
    worker) gets its answers in order; a pipelining one may get a quick answer before a
    ``/slow`` one sent earlier."""

    def __init__(self, report: Any) -> None:
        self.report = report
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.path = b""
        self.msg_id: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if self.transport is not None:
                self.transport.close()

    def on_message_begin(self) -> None:
        self.path = b""
        self.msg_id = None

    def on_url(self, url: bytes) -> None:  # called per piece of a URL split across reads
        self.path += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"webhook-id":
            self.msg_id = value.decode()

    def on_message_complete(self) -> None:
        self.report.record(self.msg_id)
        if self.path.startswith(b"/slow"):
            asyncio.get_running_loop().call_later(SLOW_SECONDS, self._answer, _OK)
        elif self.path.startswith((b"/hang", b"/fail")):
            self._answer(_NOT_FOUND)
        else:
            self._answer(_OK)

    def _answer(self, answer: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)


async def serve(conn: Connection, report: Any, cpu: Callable[[], float]) -> Any:
    """Serve on 127.0.0.1 (a free port) until SIGTERM, recording into ``report`` (a
    ``bench.sink.SinkReport``); send the URL on ``conn`` once listening; the report."""
    loop = asyncio.get_running_loop()
    server: Any = await loop.create_server(lambda: _Request(report), "127.0.0.1", 0,
                                           backlog=1024)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    host, port = server.sockets[0].getsockname()[:2]
    ready = cpu()
    conn.send(f"http://{host}:{port}")
    try:
        await stop.wait()
        report.cpu_seconds = cpu() - ready
    finally:
        server.close()
    return report
