"""A receiver that limits its callers, as a customer's API gateway does: 429 (with
``Retry-After`` if asked) whenever it got more than ``limit`` requests in the last second,
else 200; a ``pause`` script answers the first request with 429 and a Retry-After.

Records every request (monotonic time, status, webhook-id, JSON body) for the bench
(bench.flow) and the tests (tests/acceptance/test_flow_limits.py) to count. Threaded,
keep-alive (HTTP/1.1), no signature check: for rates of hundreds a second, not thousands
(bench.sink is the fast one).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Hit:
    at: float  # time.monotonic() when the request arrived
    status: int
    webhook_id: str
    body: dict[str, Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default 5 drops SYNs of a burst: 1 s late retries


class LimitedReceiver:
    """``limit``: requests per sliding second before 429s (None: never); ``retry_after``:
    the header's value on those 429s (None: no header); ``first_pause``: answer the very
    first request 429 with ``Retry-After: first_pause``."""

    def __init__(self, *, limit: int | None = None, retry_after: str | None = None,
                 first_pause: int | None = None, delay: float = 0.0) -> None:
        self.limit, self.retry_after, self.first_pause = limit, retry_after, first_pause
        self.delay = delay
        self.hits: list[Hit] = []
        self._window: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers = receiver._answer(self.headers.get("webhook-id", ""), body)
                if receiver.delay:
                    time.sleep(receiver.delay)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _answer(self, webhook_id: str, raw: bytes) -> tuple[int, dict[str, str]]:
        now = time.monotonic()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        with self._lock:
            self._window.append(now)
            while self._window and self._window[0] <= now - 1.0:
                self._window.popleft()
            status, headers = 200, {}
            if self.first_pause is not None and not self.hits:
                status, headers = 429, {"Retry-After": str(self.first_pause)}
            elif self.limit is not None and len(self._window) > self.limit:
                status = 429
                if self.retry_after is not None:
                    headers = {"Retry-After": self.retry_after}
            self.hits.append(Hit(now, status, webhook_id, body))
        return status, headers

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def delivered(self) -> list[Hit]:
        with self._lock:
            return [h for h in self.hits if h.status == 200]

    def per_second(self, start: float, end: float, status: int | None = None) -> list[int]:
        """Requests (with ``status``, if given) in each whole second from ``start``."""
        counts = [0] * max(int(end - start), 0)
        with self._lock:
            for h in self.hits:
                i = int(h.at - start)
                if 0 <= i < len(counts) and (status is None or h.status == status):
                    counts[i] += 1
        return counts

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> LimitedReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
