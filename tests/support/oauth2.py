"""A real OAuth2 token server and a receiver that checks its bearer tokens, on 127.0.0.1.

:class:`TokenServer` answers ``POST /token`` (client credentials, HTTP Basic client auth,
RFC 6749 section 4.4) with ``tok-<n>`` tokens that expire after ``expires_in`` seconds, and
counts the token requests. It can be stopped and started again on the same port (a token
endpoint that is down: connection refused), answer ``mode`` instead of a token ("500",
"html", "no_token"), take ``delay`` seconds per answer, and :meth:`revoke` every token.
:class:`BearerReceiver` takes webhook POSTs and answers 401 unless ``Authorization``
carries a token the server issued, not expired nor revoked.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_plus

from tests.support.net import free_port

CLIENT_ID = "outbox-client"
CLIENT_SECRET = "cs-Zq8!v&2 very=secret+value"  # needs form-urlencoding in Basic auth


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))


class TokenServer:
    """See module doc. ``requests``: every token request's form, in order."""

    def __init__(self, *, expires_in: float | None = 3600.0, scope: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/token"
        self.expires_in = expires_in
        self.scope = scope
        self.mode = "ok"
        self.delay = 0.0
        self.requests: list[dict[str, list[str]]] = []
        self.refused = 0  # requests with bad client credentials
        self._issued: dict[str, float] = {}  # token -> expiry (time.monotonic)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def valid(self, token: str) -> bool:
        with self._lock:
            return self._issued.get(token, 0.0) > time.monotonic()

    def revoke(self) -> None:
        with self._lock:
            self._issued.clear()

    def _issue(self, form: dict[str, list[str]], auth: str) -> tuple[int, bytes, str]:
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            self.requests.append(form)
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            if (unquote_plus(user), unquote_plus(password)) != (CLIENT_ID, CLIENT_SECRET):
                self.refused += 1
                return 401, b'{"error":"invalid_client","error_description":"bad client"}', \
                    "application/json"
            if form.get("grant_type") != ["client_credentials"]:
                return 400, b'{"error":"unsupported_grant_type"}', "application/json"
            if self.mode == "500":
                return 500, b'{"error":"server_error","error_description":"db down"}', \
                    "application/json"
            if self.mode == "html":
                return 200, b"<html>maintenance</html>", "text/html"
            if self.mode == "no_token":
                return 200, b'{"token_type":"Bearer"}', "application/json"
            token = f"tok-{len(self.requests)}"
            life = self.expires_in if self.expires_in is not None else 300.0
            self._issued[token] = time.monotonic() + life
            answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer"}
            if self.expires_in is not None:
                answer["expires_in"] = self.expires_in
            return 200, json.dumps(answer).encode(), "application/json"

    def start(self) -> TokenServer:
        owner = self

        class Handler(_Quiet):
            def do_POST(self) -> None:
                form = parse_qs(self.body().decode())
                auth = self.headers.get("authorization") or ""
                if self.path != "/token" or not auth.startswith("Basic "):
                    self.answer(400, b'{"error":"invalid_request"}')
                    return
                self.answer(*owner._issue(form, auth))

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> TokenServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BearerReceiver:
    """Webhook receiver: 204 to a valid bearer token of ``tokens``, 401 otherwise.
    ``seen``: (webhook-id, token, status) of every request, in order."""

    def __init__(self, tokens: TokenServer) -> None:
        self.tokens = tokens
        self.seen: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(_Quiet):
            def do_POST(self) -> None:
                self.body()
                auth = self.headers.get("authorization") or ""
                token = auth[7:] if auth.startswith("Bearer ") else ""
                status = 204 if token and owner.tokens.valid(token) else 401
                with owner._lock:
                    owner.seen.append((self.headers.get("webhook-id") or "", token, status))
                self.answer(status, b"" if status == 204 else b'{"error":"invalid_token"}')

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def delivered(self) -> set[str]:
        with self._lock:
            return {wid for wid, _, status in self.seen if status == 204}

    def unauthorized(self) -> int:
        with self._lock:
            return sum(1 for _, _, status in self.seen if status == 401)

    def __enter__(self) -> BearerReceiver:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
