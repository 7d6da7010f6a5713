"""Keep-alive HTTP/1.1 POSTs for the worker's sender: one asyncio ``Protocol`` per
connection, the answer parsed by ``httptools`` (llhttp, the parser uvicorn uses).

Why not aiohttp's ``ClientSession`` here: a webhook POST needs one write and one parse,
and aiohttp's per-request machinery (request and response objects, header merging,
payload registry, timers, traces) made the worker's sender cost 103 us of CPU per request
against 29 us through this (``python -m bench.clients``; docs/performance.md): about
40% of a worker's CPU per delivery. aiohttp still serves the OAuth2 token requests
(:mod:`.oauth2`), a rare path.

Guarantees of :meth:`Pool.post`:

- One request, never retried, never redirected; the connection is returned to the pool
  only after a complete answer whose framing allows keep-alive (no ``Connection:
  close``, not read to EOF, nothing unread past the cap); any other end (an error, a
  cancel, the body cap reached) closes it. Bytes past the answer (more than its
  Content-Length announced, a second message) or while the connection is idle close it
  too: they are never read as the next request's answer. A connection idle for
  :data:`KEEPALIVE_SECONDS`, or closed by the receiver while idle, is never reused; idle
  ones are swept every :data:`SWEEP_SECONDS` of use.
- An answer's head (status line, headers, trailers, chunk framing) is bounded:
  :data:`MAX_HEAD_BYTES` and :data:`MAX_HEADERS` lines, or :class:`ResponseInvalid`.
- Connections are pooled per (scheme, host, port, TLS context): a connection made with
  one endpoint's client certificate never carries another's request. At most
  ``max_connections`` requests are in flight per pool; more wait for a free one.
- Addresses come from ``resolver`` (the SSRF guard) when there is one: the connection is
  made to exactly one of the addresses it returned, tried in order (the next after a
  failure or a connect timeout). An IP-literal host (also a numeric one such as
  ``127.1``) is connected to as the address :meth:`GuardedResolver.check_literal` judged
  (:func:`~outbox.delivery.pinning.literal_address`); any other host, however numeric it
  looks, goes through the resolver. TLS checks the certificate against the URL's host
  name (SNI).
- ``connect`` bounds making one connection (TCP and TLS); ``read``, when set, each wait
  for response bytes; the caller bounds the whole (a cancel closes the connection).
- Status and headers land in ``into`` when they arrive, the decoded body as it arrives
  (at most ``body_cap`` bytes; ``gzip``/``deflate`` inflated under that cap), so a caller
  whose deadline fires keeps what was read.
- Failures raise: :class:`ConnectFailed` (an ``OSError``; its ``__cause__`` is the
  socket or TLS error), :class:`Disconnected`, :class:`ResponseInvalid`,
  :class:`ReadTimedOut` / :class:`ConnectTimedOut` (``TimeoutError``),
  :class:`ContentDecodingError`, and the resolver's own errors.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import zlib
from collections.abc import Mapping
from typing import Any, Protocol, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from outbox.delivery.pinning import GuardedResolver, literal_address

_Key = tuple[str, str, int, "ssl.SSLContext | None"]
KEEPALIVE_SECONDS = 30.0
"""An idle connection older than this is closed instead of reused."""
SWEEP_SECONDS = 5.0
"""Seconds between two sweeps of the idle connections (:meth:`Pool._sweep`)."""
MAX_HEAD_BYTES = 65536
"""Most bytes of an answer that are not body (status line, headers, trailers); more is
refused as :class:`ResponseInvalid` (a receiver could otherwise fill memory with them)."""
MAX_HEADERS = 256
"""Most header lines in an answer."""


class ConnectFailed(OSError):
    """No connection could be made (refused, unreachable, TLS handshake failed)."""


class Disconnected(ConnectionError):
    """The connection ended before the answer was complete."""


class ResponseInvalid(Exception):
    """The answer is not valid HTTP/1.x."""


class ReadTimedOut(TimeoutError):
    """No response bytes within the read timeout."""


class ConnectTimedOut(TimeoutError):
    """No connection within the connect timeout."""


class ContentDecodingError(ValueError):
    """A compressed response body that does not inflate."""


class Into(Protocol):
    """Where an answer lands (``outbox.delivery.sender._Exchange``)."""

    status: int | None
    headers: Mapping[str, str]
    body: bytearray


def _inflater(encoding: str | None) -> Any:
    if encoding is None:
        return None
    if encoding.strip().lower() in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(32 + zlib.MAX_WBITS)  # zlib or gzip header, detected
    return None


class _Connection(asyncio.Protocol):
    """One connection; one exchange at a time (:meth:`exchange`). Bytes that arrive when
    no exchange waits, a second message after the answer, a parser error or a head larger
    than :data:`MAX_HEAD_BYTES` end its reuse: it is closed, never pooled."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._done: asyncio.Future[None] | None = None
        self._into: Into | None = None
        self._cap = 0
        self._inflater: Any = None
        self._headers: list[tuple[str, str]] = []
        self._informational = self._complete = self._stray = self._reusable = False
        self._unaccounted = 0  # bytes fed that were not body: heads, chunk framing, trailers
        self._head_bytes = 0
        self._chunks = 0
        self._read: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def exchange(self, data: bytes, into: Into, cap: int,
                 read: float | None) -> asyncio.Future[None]:
        """Send ``data`` (a whole request); the future ends with the answer (see
        :meth:`Pool.post`). The caller closes the connection unless :meth:`reusable`."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self._into, self._cap, self._read = into, cap, read
        self._inflater, self._headers = None, []
        self._complete = self._stray = self._reusable = False
        self._unaccounted = self._chunks = self._head_bytes = 0
        self.transport.write(data)
        if read is not None:
            self._timer = loop.call_later(read, self._read_timeout)
        return self._done

    def reusable(self) -> bool:
        return self._reusable and not self._stray and not self.closed and \
            self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self._cancel_timer()
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, exc: BaseException | None = None) -> None:
        self._cancel_timer()
        done = self._done
        if done is not None and not done.done():
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)

    def _fail(self, exc: BaseException) -> None:
        """End the exchange with ``exc`` (if still open) and the connection with it."""
        self._reusable = False
        self._finish(exc)
        self.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _read_timeout(self) -> None:
        self._timer = None
        self._fail(ReadTimedOut(f"no response bytes for {self._read:.1f}s"))

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses: no isinstance check)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        done = self._done
        if done is None or done.done():  # nobody waits: stray bytes, or past the cap
            self._fail(Disconnected("unexpected bytes"))
            return
        if self._timer is not None:
            self._timer.cancel()
            assert self._read is not None
            self._timer = asyncio.get_running_loop().call_later(self._read,
                                                                self._read_timeout)
        self._unaccounted += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ResponseInvalid("the receiver switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ResponseInvalid(f"invalid HTTP response: {exc}"))
        if self._unaccounted > MAX_HEAD_BYTES + 64 * self._chunks or \
                len(self._headers) > MAX_HEADERS:
            self._fail(ResponseInvalid("the response head is too large"))

    def eof_received(self) -> bool:
        self.closed = True
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        into = self._into
        if exc is None and into is not None and into.status is not None and \
                not self._complete and self._read_to_eof(into.headers):
            self._finish()  # a body delimited by the end of the connection: complete
        else:
            self._finish(Disconnected(f"server disconnected{f': {exc}' if exc else ''}"))

    @staticmethod
    def _read_to_eof(headers: Mapping[str, str]) -> bool:
        return "content-length" not in headers and \
            "chunked" not in headers.get("transfer-encoding", "").lower()

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self._complete:  # a second message after the answer: never ours
            self._stray = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._stray:
            self._headers.append((name.decode("latin-1"), value.decode("latin-1")))
            self._head_bytes += len(name) + len(value)

    def on_headers_complete(self) -> None:
        into = self._into
        if self._stray or into is None:
            return
        if self._head_bytes > MAX_HEAD_BYTES or len(self._headers) > MAX_HEADERS:
            self._fail(ResponseInvalid("the response head is too large"))
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            self._informational, self._headers, self._head_bytes = True, [], 0
            return
        headers = CIMultiDictProxy(CIMultiDict(self._headers))
        into.status, into.headers = status, headers
        self._inflater = _inflater(headers.get("content-encoding"))
        if self._cap <= 0:
            self._finish()  # nothing of the body is kept: the connection is not reused

    def on_body(self, chunk: bytes) -> None:
        self._unaccounted -= len(chunk)
        self._chunks += 1
        into, done = self._into, self._done
        if self._stray or self._informational or into is None or done is None or \
                done.done() or len(into.body) >= self._cap:
            return
        if self._inflater is None:
            into.body += chunk[:self._cap - len(into.body)]
        else:
            try:
                while chunk and len(into.body) < self._cap:
                    into.body += self._inflater.decompress(chunk, self._cap - len(into.body))
                    chunk = self._inflater.unconsumed_tail
            except zlib.error as exc:
                self._finish(ContentDecodingError(f"cannot inflate the response body: {exc}"))
                return
        if len(into.body) >= self._cap:
            self._finish()  # the cap: reading stops here, the rest is never read

    def on_message_complete(self) -> None:
        if self._stray:
            return
        if self._informational:
            self._informational = False
            return
        self._complete = True
        done = self._done
        ok = done is not None and (not done.done() or (not done.cancelled()
                                                       and done.exception() is None))
        self._reusable = ok and self.parser.should_keep_alive()
        self._finish()


class Pool:
    """Keep-alive connections and the requests over them (see the module's guarantees)."""

    def __init__(self, *, max_connections: int = 100,
                 resolver: GuardedResolver | None = None) -> None:
        self.resolver = resolver
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[_Key, list[_Connection]] = {}
        self._swept = time.monotonic()

    async def post(self, url: URL, body: bytes, headers: Mapping[str, str], *,
                   connect: float | None, read: float | None, body_cap: int, into: Into,
                   context: ssl.SSLContext | None) -> None:
        """POST ``body`` to ``url`` (``http``, or ``https`` with ``context``)."""
        host, port = url.raw_host or "", url.port or (443 if context else 80)
        data = _request(url, host, port, body, headers)
        key = (url.scheme, host, port, context)  # the context itself: never a reused id
        async with self._slots:
            conn = self._checkout(key) or await self._connect(host, port, connect, context)
            try:
                await conn.exchange(data, into, body_cap, read)
            finally:
                now = time.monotonic()
                if conn.reusable():
                    conn.idle_since = now
                    self._idle.setdefault(key, []).append(conn)
                else:
                    conn.close()
                if now - self._swept >= SWEEP_SECONDS:
                    self._swept = now
                    self._sweep()

    def _checkout(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable() and now - conn.idle_since < KEEPALIVE_SECONDS:
                return conn
            conn.close()
        return None

    async def _connect(self, host: str, port: int, timeout: float | None,
                       context: ssl.SSLContext | None) -> _Connection:
        literal = literal_address(host)  # the address Transport.target checked
        if literal is not None:
            addresses = [str(literal)]
        elif self.resolver is not None:
            addresses = [r["host"] for r in await self.resolver.resolve(
                host, port, socket.AF_UNSPEC)]
        else:
            addresses = [host]
        loop = asyncio.get_running_loop()
        failure: OSError | None = None
        timed_out = False
        for address in addresses:  # in the resolver's order; the next after a failure
            try:
                async with asyncio.timeout(timeout):
                    _transport, conn = await loop.create_connection(
                        _Connection, address, port, ssl=context,
                        server_hostname=host if context else None)
                return conn
            except TimeoutError:
                timed_out = True
            except OSError as exc:
                failure = exc
        if failure is None and timed_out:
            raise ConnectTimedOut(f"no connection to {host}:{port} within {timeout}s")
        raise ConnectFailed(f"cannot connect to {host}:{port}: {failure}") from failure

    def _sweep(self) -> None:
        """Close and forget the idle connections that will never be reused: closed by
        the receiver, idle too long, or of a key no request uses any more (a dropped
        client-certificate context)."""
        now = time.monotonic()
        for key, idle in list(self._idle.items()):
            keep = [c for c in idle if not c.closed and now - c.idle_since < KEEPALIVE_SECONDS]
            for conn in idle:
                if conn not in keep:
                    conn.close()
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _request(url: URL, host: str, port: int, body: bytes,
             headers: Mapping[str, str]) -> bytes:
    """The request's bytes: request line, Host, Content-Length, ``headers``, body."""
    default = port == (443 if url.scheme == "https" else 80)
    name = f"[{host}]" if ":" in host else host
    authority = name if default else f"{name}:{port}"
    head = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    if head.count("\n") != len(headers) or "\r" in head.replace("\r\n", ""):
        raise ValueError("a header name or value holds a line break")
    return (f"POST {url.raw_path_qs} HTTP/1.1\r\nhost: {authority}\r\n"
            f"content-length: {len(body)}\r\n{head}\r\n").encode() + body
