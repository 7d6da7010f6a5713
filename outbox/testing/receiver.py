"""A real, stdlib-only HTTP webhook receiver for demos and tests (not for production).

``outbox demo``, the ``outbox_receiver`` fixture of :mod:`outbox.testing.plugin` and the
delivery-worker tests point endpoints at a :class:`Receiver`;
``python -m outbox.testing.receiver --port 8080 --secret whsec_...`` runs one standalone and
prints ``<webhook-id> <type> signature=ok|bad|unchecked`` per request. It answers with a
scripted :class:`Behaviour` (status, headers, body, delay); a subclass of :class:`Behaviour`
may carry out any other answer through :meth:`Behaviour.carry_out` (the project's own tests
script resets, hangs, trickles and gzip bombs that way).

What it guarantees
    * Every request whose body was read completely is recorded exactly once, in arrival
      order, *before* its scripted response (delay, then the answer) is carried out; a
      request that arrives after :meth:`Receiver.stop` began is closed unrecorded.
    * Recording is thread-safe; :meth:`Receiver.wait_for` sleeps on a condition variable.
    * ``signature_ok`` is the verdict of :func:`outbox.signing.verify` (default 300 s
      tolerance) with the secret for the request path, or ``None`` when none is known.
    * HTTP/1.1 keep-alive: every response carries ``Content-Length``; request bodies are
      read by ``Content-Length`` (chunked uploads are refused with 400). ``stop()``
      also closes idle keep-alive connections: a pooled client cannot reach a stopped
      receiver.
    * Scripts are per path prefix (longest match, on the path without query string):
      behaviours are consumed in order and the last one repeats.

It is a thread-per-connection test double: no TLS, no auth, no limits beyond a 64 MiB
request body, every body kept in memory. Do not expose it to untrusted networks.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import urlsplit

from outbox.errors import InvalidEndpoint, InvalidSignature
from outbox.signing import check_key, verify
from outbox.testing._answers import AnsweringHandler, Behaviour

__all__ = ["AnsweringHandler", "Behaviour", "Received", "Receiver", "main"]

MAX_REQUEST_BODY = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Received:
    """One recorded request. ``headers`` has lower-cased names (last duplicate wins);
    ``path`` is the request target as sent (query included); ``at`` is ``time.time()``
    when the body had been read; ``timestamp`` is the parsed ``webhook-timestamp``."""

    path: str
    webhook_id: str | None
    timestamp: int | None
    signature_ok: bool | None
    body: bytes
    headers: dict[str, str]
    at: float
    answer: int | None = None  # the status it was answered with; None: reset, hang, garbage

    @property
    def type(self) -> str | None:
        """The ``type`` key of a JSON object body, else ``None``. Pings (Standard Webhooks
        envelopes) carry one; an event's request body is its payload exactly as emitted,
        so this is the payload's own ``type`` key, if it has one (the event is known by
        ``webhook_id``, its id)."""
        kind = _event_type(self.body)
        return None if kind == "-" else kind

    def json(self) -> Any:
        """The body decoded as JSON (``ValueError`` if it is not JSON)."""
        return json.loads(self.body)


def _longest_prefix(path: str, prefixes: Mapping[str, Any]) -> str | None:
    matches = [prefix for prefix in prefixes if path.startswith(prefix)]
    return max(matches, key=len) if matches else None


def _parse_timestamp(raw: str | None) -> int | None:
    try:
        return int(float(raw)) if raw is not None else None
    except (ValueError, OverflowError):
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], receiver: Receiver) -> None:
        self.receiver = receiver
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the FQDN, which can stall on reverse DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # clients vanishing mid-request is routine here
        super().handle_error(request, client_address)


class _Handler(AnsweringHandler):
    protocol_version = "HTTP/1.1"
    server_version = "outbox-test-receiver"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        receiver = cast(_Server, self.server).receiver
        if receiver.stopping.is_set():
            self.close_connection = True
            return
        try:
            body = self._read_body()
            if body is None:
                return
            behaviour = receiver._record(self.path, dict(self.headers.items()), body)
            if behaviour.delay and receiver.stopping.wait(behaviour.delay):
                self.close_connection = True
                return
            behaviour.carry_out(self, receiver.stopping)
        except OSError:
            self.close_connection = True

    do_POST = do_PUT = do_PATCH = do_GET = do_DELETE = _handle

    def _read_body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if "Transfer-Encoding" in self.headers or not 0 <= length <= MAX_REQUEST_BODY:
            self.send_error(413 if length > MAX_REQUEST_BODY else 400, "need a Content-Length")
            self.close_connection = True
            return None
        return self.rfile.read(length)

class Receiver:
    """Record webhooks on ``http://127.0.0.1:<port>`` from a daemon thread (see module).

    ``secret`` is one secret for every path, or a mapping of path prefix to secret
    (longest prefix wins). ``on_receive`` runs in the handler thread after recording.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        secret: str | Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        default: Behaviour | None = None,
        on_receive: Callable[[Received], None] | None = None,
    ) -> None:
        self._secrets = {"": secret} if isinstance(secret, str) else dict(secret or {})
        for value in self._secrets.values():
            check_key(value)  # refuse a malformed secret (or public key) now, not per request
        self._host = host
        self._default = default or Behaviour()
        self._on_receive = on_receive
        self._cond = threading.Condition()
        self._records: list[Received] = []
        self._counts: collections.Counter[str] = collections.Counter()
        self._scripts: dict[str, tuple[list[Behaviour], int]] = {}
        self.stopping = threading.Event()
        self._server = _Server((host, port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"outbox-receiver-{self.port}", daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def stop(self) -> None:
        """Stop serving, end hanging/trickling answers, close every connection. Idempotent."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()
        self._thread.join()
        with self._cond:
            self._cond.notify_all()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def script(self, path: str, responses: Sequence[Behaviour]) -> None:
        """Answer requests under ``path`` with ``responses`` in order; the last repeats.
        Replaces any script for the same prefix and restarts it."""
        if not responses:
            raise ValueError("a script needs at least one Behaviour")
        with self._cond:
            self._scripts[path] = (list(responses), 0)

    def set_default(self, behaviour: Behaviour) -> None:
        """Answer with ``behaviour`` where no script prefix matches."""
        with self._cond:
            self._default = behaviour

    def _next_behaviour(self, path: str) -> Behaviour:
        prefix = _longest_prefix(path, self._scripts)
        if prefix is None:
            return self._default
        responses, position = self._scripts[prefix]
        self._scripts[prefix] = (responses, position + 1)
        return responses[min(position, len(responses) - 1)]

    def _check(self, path: str, body: bytes, headers: Mapping[str, str]) -> bool | None:
        prefix = _longest_prefix(path, self._secrets)
        if prefix is None:
            return None
        try:
            verify(self._secrets[prefix], body, headers)
        except InvalidSignature:
            return False
        return True

    def _record(self, target: str, raw_headers: Mapping[str, str], body: bytes) -> Behaviour:
        path = urlsplit(target).path
        headers = {name.lower(): value for name, value in raw_headers.items()}
        signature_ok = self._check(path, body, headers)
        with self._cond:
            behaviour = self._next_behaviour(path)
            record = Received(
                path=target,
                webhook_id=headers.get("webhook-id"),
                timestamp=_parse_timestamp(headers.get("webhook-timestamp")),
                signature_ok=signature_ok,
                body=body,
                headers=headers,
                at=time.time(),
                answer=behaviour.status_sent(),
            )
            self._records.append(record)
            if record.webhook_id is not None:
                self._counts[record.webhook_id] += 1
            self._cond.notify_all()
        if self._on_receive is not None:
            self._on_receive(record)
        return behaviour

    @property
    def received(self) -> list[Received]:
        """Every recorded request so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._records)

    def counts(self) -> collections.Counter[str]:
        """Requests per ``webhook-id`` (requests without one are not counted)."""
        with self._cond:
            return collections.Counter(self._counts)

    def duplicates(self) -> dict[str, int]:
        """``webhook-id`` -> count, for ids received more than once."""
        with self._cond:
            return {msg_id: n for msg_id, n in self._counts.items() if n > 1}

    def invalid_signatures(self) -> list[Received]:
        """Requests whose signature was checked and rejected."""
        with self._cond:
            return [r for r in self._records if r.signature_ok is False]

    def wait_for(self, n: int, timeout: float, *, distinct: bool = False) -> bool:
        """Block until ``n`` requests (``distinct``: ``n`` different webhook-ids) have been
        recorded; False on timeout or when the receiver stops first."""

        def done() -> bool:
            got = len(self._counts) if distinct else len(self._records)
            return got >= n or self.stopping.is_set()

        with self._cond:
            self._cond.wait_for(done, timeout)
            return (len(self._counts) if distinct else len(self._records)) >= n

    def wait(self, n: int = 1, timeout: float = 10.0, *, distinct: bool = False) -> list[Received]:
        """:meth:`wait_for`, then every record so far; ``AssertionError`` naming what did
        arrive when ``n`` requests did not arrive within ``timeout`` seconds."""
        if not self.wait_for(n, timeout, distinct=distinct):
            got = [(r.webhook_id, r.type, r.signature_ok) for r in self.received]
            what = "distinct webhook-ids" if distinct else "requests"
            raise AssertionError(f"expected {n} {what} within {timeout:g} s at {self.url},"
                                 f" got {len(got)}: {got}")
        return self.received

    def clear(self) -> None:
        """Forget every record (scripts and their positions are kept)."""
        with self._cond:
            self._records.clear()
            self._counts.clear()


def _event_type(body: bytes) -> str:
    try:
        decoded = json.loads(body)
    except ValueError:
        return "-"
    kind = decoded.get("type") if isinstance(decoded, dict) else None
    return kind if isinstance(kind, str) else "-"


def _print_delivery(record: Received) -> None:
    verdict = {True: "ok", False: "bad", None: "unchecked"}[record.signature_ok]
    line = f"{record.webhook_id or '-'} {_event_type(record.body)} signature={verdict}"
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m outbox.testing.receiver``: receive and print webhooks until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m outbox.testing.receiver",
        description="Test webhook receiver: prints '<webhook-id> <type> signature=...'.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port, 0 for any (8080)")
    parser.add_argument("--secret", help="whsec_... secret (or whpk_... public key) to"
                        " verify signatures with")
    args = parser.parse_args(argv)
    try:
        receiver = Receiver(args.port, secret=args.secret, host=args.host,
                            on_receive=_print_delivery)
    except InvalidEndpoint as exc:
        parser.error(str(exc))
    except OSError as exc:
        parser.error(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    with receiver:
        print(f"listening on {receiver.url}", file=sys.stderr, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
