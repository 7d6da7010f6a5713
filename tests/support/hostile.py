"""Hostile answers for the test receiver: what a delivery worker must survive.

:class:`Behaviour` extends :class:`outbox.testing.receiver.Behaviour` (a plain answer:
status, headers, body, delay) with a TCP reset, non-HTTP garbage, a hang, a redirect, a
body trickled a byte at a time, or a gzip bomb. Any :class:`~outbox.testing.receiver.Receiver`
carries them out: the receiver records the request, waits ``delay``, then calls
:meth:`Behaviour.carry_out` with its handler.

What it guarantees
    * One answer per behaviour, chosen by the precedence documented on :class:`Behaviour`;
      :meth:`Behaviour.status_sent` tells in advance which status the client will see
      (``None`` when it sees none), so a request can be recorded before it is answered.
    * Every HTTP answer carries ``Content-Length`` (a ``Content-Length`` in ``headers`` is
      replaced), so keep-alive framing stays correct; answers that never finish a response
      (reset, garbage, hang, trickle) mark the connection to be closed afterwards.
    * ``reset`` closes with ``SO_LINGER`` 0: the client sees a TCP RST, not a FIN.
    * ``hang`` and ``trickle`` end as soon as the ``stopping`` event is set, so a stopped
      receiver leaves no thread writing.
    * :func:`gzip_bomb` is built once per size and process (thread-safe cache), chunk by
      chunk: the inflated bytes are never held in memory, only ~1 KiB per MiB announced.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import zlib

from outbox.testing import receiver
from outbox.testing.receiver import AnsweringHandler, Receiver

__all__ = ["TRICKLE_LENGTH", "Behaviour", "Receiver", "gzip_bomb"]

TRICKLE_LENGTH = 1024 * 1024  # announced Content-Length of a trickled body
_MIB = 1024 * 1024
_GARBAGE = b"\x00\xff\xfeTHIS IS NOT HTTP\r\n\x1b[31m\x00garbage\r\n\r\n"


@dataclasses.dataclass(frozen=True, slots=True)
class Behaviour(receiver.Behaviour):
    """One scripted answer. Hostile fields win over the plain answer, checked in order:
    ``reset`` > ``garbage`` > ``hang`` > ``redirect_to`` > ``trickle`` > ``gzip_bomb_mb``.
    ``delay`` applies to all of them. ``Content-Length`` in ``headers`` is ignored."""

    redirect_to: str | None = None  # 302 (or ``status`` if 3xx) with Location
    trickle: float | None = None  # seconds per body byte of a TRICKLE_LENGTH body
    reset: bool = False  # close with SO_LINGER 0: the client sees a TCP RST
    hang: bool = False  # never answer; closed when the receiver stops
    gzip_bomb_mb: int | None = None  # gzip body inflating to this many MiB of zeros
    garbage: bool = False  # write non-HTTP bytes, then close

    def __post_init__(self) -> None:
        receiver.Behaviour.__post_init__(self)
        if (self.trickle is not None and self.trickle <= 0) or (self.gzip_bomb_mb or 1) < 1:
            raise ValueError(f"need trickle > 0 and gzip_bomb_mb >= 1, got {self!r}")

    def status_sent(self) -> int | None:
        """The status line this answers with; ``None`` for reset, hang and garbage."""
        if self.reset or self.hang or self.garbage:
            return None
        if self.redirect_to is not None:
            return self.status if 300 <= self.status < 400 else 302
        return self.status

    def carry_out(self, handler: AnsweringHandler, stopping: threading.Event) -> None:
        if self.reset:
            _reset(handler)
        elif self.garbage:
            handler.wfile.write(_GARBAGE)
            handler.close_connection = True
        elif self.hang:
            stopping.wait()
            handler.close_connection = True
        elif self.redirect_to is not None:
            status = self.status if 300 <= self.status < 400 else 302
            handler.send(status, {**self.headers, "Location": self.redirect_to}, self.body)
        elif self.trickle is not None:
            self._trickle(handler, self.trickle, stopping)
        elif self.gzip_bomb_mb is not None:
            headers = {"Content-Type": "application/json", **self.headers,
                       "Content-Encoding": "gzip"}
            handler.send(self.status, headers, gzip_bomb(self.gzip_bomb_mb))
        else:
            receiver.Behaviour.carry_out(self, handler, stopping)

    def _trickle(self, handler: AnsweringHandler, seconds: float,
                 stopping: threading.Event) -> None:
        handler.start(self.status, self.headers, TRICKLE_LENGTH)
        handler.close_connection = True  # the body is never completed
        for _ in range(TRICKLE_LENGTH):
            handler.wfile.write(b" ")
            if stopping.wait(seconds):
                return


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


def _reset(handler: AnsweringHandler) -> None:
    handler.close_connection = True
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.rfile.close()  # drop the makefile reference so close() really closes (RST)
    handler.connection.close()
