"""Scripted answers of :class:`outbox.testing.receiver.Receiver` (re-exported there):
:class:`Behaviour`, one answer, and :class:`AnsweringHandler`, the request handler it
writes through. A subclass of :class:`Behaviour` may write any other answer (the
project's own tests script resets, hangs, trickles and gzip bombs that way)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler

__all__ = ["AnsweringHandler", "Behaviour"]


@dataclasses.dataclass(frozen=True, slots=True)
class Behaviour:
    """One scripted answer: wait ``delay`` seconds, then answer ``status`` with ``headers``
    and ``body`` (``Content-Length`` in ``headers`` is replaced by the body's length).

    Subclasses override :meth:`status_sent` and :meth:`carry_out` to answer otherwise."""

    status: int = 200
    delay: float = 0.0
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 999 or self.delay < 0:
            raise ValueError(f"need 100 <= status <= 999 and delay >= 0, got {self!r}")

    def status_sent(self) -> int | None:
        """The status line the client will see (``None``: none), known before answering,
        so a request can be recorded before it is answered."""
        return self.status

    def carry_out(self, handler: AnsweringHandler, stopping: threading.Event) -> None:
        """Write this answer to ``handler``'s connection; return early once ``stopping``
        is set if the answer takes time."""
        handler.send(self.status, self.headers, self.body)


class AnsweringHandler(BaseHTTPRequestHandler):
    """The request handler a :class:`Behaviour` writes its answer through."""

    def send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        """A complete answer with ``Content-Length`` (keep-alive framing stays correct)."""
        self.start(status, headers, len(body))
        self.wfile.write(body)

    def start(self, status: int, headers: Mapping[str, str], length: int) -> None:
        """The status line and headers, announcing a body of ``length`` bytes."""
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
