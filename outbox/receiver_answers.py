"""The scripted answers of the test receiver: :class:`Behaviour` and how one is carried out.

A :class:`Behaviour` is either a plain answer (status, headers, body) or a hostile one a
delivery worker must survive: a TCP reset, non-HTTP garbage, a hang, a redirect, a body
trickled a byte at a time, or a gzip bomb. :class:`AnsweringHandler` writes it to the
connection; :mod:`outbox.receiver` subclasses it, records the request and picks the
behaviour (and applies its ``delay``) before asking for the answer.

What it guarantees
    * One answer per behaviour, chosen by the precedence documented on :class:`Behaviour`;
      :func:`answer_status` tells in advance which status the client will see (``None``
      when it sees none), so a request can be recorded before it is answered.
    * Every HTTP answer carries ``Content-Length`` (a ``Content-Length`` in ``headers`` is
      replaced), so keep-alive framing stays correct; answers that never finish a response
      (reset, garbage, hang, trickle) mark the connection to be closed afterwards.
    * ``reset`` closes with ``SO_LINGER`` 0: the client sees a TCP RST, not a FIN.
    * ``hang`` and ``trickle`` end as soon as the ``stopping`` event is set, so a stopped
      receiver leaves no thread writing.
    * :func:`gzip_bomb` is built once per size and process (thread-safe cache), chunk by
      chunk: the inflated bytes are never held in memory, only ~1 KiB per MiB announced.

Stdlib only, like the receiver: a test double, not production code.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import zlib
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler

__all__ = ["TRICKLE_LENGTH", "AnsweringHandler", "Behaviour", "answer_status", "gzip_bomb"]

TRICKLE_LENGTH = 1024 * 1024  # announced Content-Length of a trickled body
_MIB = 1024 * 1024
_GARBAGE = b"\x00\xff\xfeTHIS IS NOT HTTP\r\n\x1b[31m\x00garbage\r\n\r\n"


@dataclasses.dataclass(frozen=True, slots=True)
class Behaviour:
    """One scripted answer. Hostile fields win over the plain answer, checked in order:
    ``reset`` > ``garbage`` > ``hang`` > ``redirect_to`` > ``trickle`` > ``gzip_bomb_mb``.
    ``delay`` applies to all of them. ``Content-Length`` in ``headers`` is ignored."""

    status: int = 200
    delay: float = 0.0
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    redirect_to: str | None = None  # 302 (or ``status`` if 3xx) with Location
    trickle: float | None = None  # seconds per body byte of a TRICKLE_LENGTH body
    reset: bool = False  # close with SO_LINGER 0: the client sees a TCP RST
    hang: bool = False  # never answer; closed when the receiver stops
    gzip_bomb_mb: int | None = None  # gzip body inflating to this many MiB of zeros
    garbage: bool = False  # write non-HTTP bytes, then close

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 999 or self.delay < 0:
            raise ValueError(f"need 100 <= status <= 999 and delay >= 0, got {self!r}")
        if (self.trickle is not None and self.trickle <= 0) or (self.gzip_bomb_mb or 1) < 1:
            raise ValueError(f"need trickle > 0 and gzip_bomb_mb >= 1, got {self!r}")


def answer_status(b: Behaviour) -> int | None:
    """The status line ``b`` answers with; ``None`` for reset, hang and garbage."""
    if b.reset or b.hang or b.garbage:
        return None
    if b.redirect_to is not None:
        return b.status if 300 <= b.status < 400 else 302
    return b.status


_bomb_lock = threading.Lock()
_bomb_cache: dict[int, bytes] = {}


def gzip_bomb(mib: int) -> bytes:
    """Gzip bytes inflating to ``mib`` MiB of zeros; compressed chunk by chunk, cached."""
    with _bomb_lock:
        if mib not in _bomb_cache:
            compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip container
            zeros = bytes(_MIB)
            parts = [compressor.compress(zeros) for _ in range(mib)]
            parts.append(compressor.flush())
            _bomb_cache[mib] = b"".join(parts)
        return _bomb_cache[mib]


class AnsweringHandler(BaseHTTPRequestHandler):
    """A request handler that can carry out a :class:`Behaviour` (see module).

    Subclasses read and record the request, then call :meth:`_respond`."""

    def _respond(self, b: Behaviour, stopping: threading.Event) -> None:
        if b.reset:
            self._reset()
        elif b.garbage:
            self.wfile.write(_GARBAGE)
            self.close_connection = True
        elif b.hang:
            stopping.wait()
            self.close_connection = True
        elif b.redirect_to is not None:
            status = b.status if 300 <= b.status < 400 else 302
            self._send(status, {**b.headers, "Location": b.redirect_to}, b.body)
        elif b.trickle is not None:
            self._trickle(b, b.trickle, stopping)
        elif b.gzip_bomb_mb is not None:
            headers = {"Content-Type": "application/json", **b.headers, "Content-Encoding": "gzip"}
            self._send(b.status, headers, gzip_bomb(b.gzip_bomb_mb))
        else:
            self._send(b.status, b.headers, b.body)

    def _send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self._start(status, headers, len(body))
        self.wfile.write(body)

    def _start(self, status: int, headers: Mapping[str, str], length: int) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _trickle(self, b: Behaviour, seconds: float, stopping: threading.Event) -> None:
        self._start(b.status, b.headers, TRICKLE_LENGTH)
        self.close_connection = True  # the body is never completed
        for _ in range(TRICKLE_LENGTH):
            self.wfile.write(b" ")
            if stopping.wait(seconds):
                return

    def _reset(self) -> None:
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # drop the makefile reference so close() really closes (RST)
        self.connection.close()
