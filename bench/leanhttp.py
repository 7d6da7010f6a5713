"""A lean HTTP/1.1 POST over keep-alive connections: the floor of a webhook client.

Not the worker's transport and not a design: no TLS, no SSRF guard, no timeouts, no
pool limits beyond one connection per lane, no redirects, no decompression, no error
translation. It measures what an HTTP POST costs in Python once the client does nothing
else -- an asyncio ``Protocol`` that writes the request in one ``write`` and parses the
answer with ``httptools`` (llhttp, the parser uvicorn uses) -- so ``bench.clients`` can
put a figure beside aiohttp's ``ClientSession`` (the worker's and pgqueuer's handler's
client) and show how much of a delivery's CPU a leaner client could take away.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httptools


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, list[tuple[bytes, bytes]], bytes]] | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.keep_alive = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("connection closed"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # (reset once the message ends)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self.parser.get_status_code(), self.headers,
                                    bytes(self.body)))

    async def request(self, data: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.headers, self.body = [], bytearray()
        self.transport.write(data)
        return await self.waiter


class LeanClient:
    """POSTs to one ``http://`` URL over connections kept per lane (``lanes`` at most)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path or "/"
        self.idle: list[_Connection] = []

    async def post(self, body: bytes, headers: dict[str, str]) -> int:
        """POST ``body`` with ``headers``; the status (the body is read and dropped)."""
        conn = self.idle.pop() if self.idle else await self._connect()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        data = (f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                f"content-length: {len(body)}\r\n{head}\r\n").encode("latin-1") + body
        status, _headers, _body = await conn.request(data)
        if conn.keep_alive:
            self.idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()
        return status

    async def _connect(self) -> _Connection:
        _transport, conn = await asyncio.get_running_loop().create_connection(
            _Connection, self.host, self.port)
        return conn

    def close(self) -> None:
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()
