"""OAuth2 client-credentials access tokens of HTTP endpoints: fetched once, shared, refreshed.

An endpoint with OAuth2 (``outbox endpoints add ... --oauth2-token-url``) gets
``Authorization: Bearer <token>`` on every delivery; :func:`~.request.send_job` asks the
transport's :class:`TokenCache` for the token. Guarantees of :class:`TokenCache`:

- One token per :class:`Client` (token URL, client id, client secret, scope) per worker
  process, used by every delivery with those credentials until
  :func:`refresh_margin` before its ``expires_in`` runs out (counted from when the token
  request was sent); a token answer without ``expires_in`` is used for
  :data:`DEFAULT_EXPIRES_IN` seconds (300). Changing any of the credentials makes a new
  :class:`Client`, hence a new token.
- At most one token request per :class:`Client` in flight: concurrent deliveries await the
  same fetch (a task, shielded from a waiter's cancellation).
- :meth:`TokenCache.invalidate` drops a token a receiver refused (401) only if it is still
  the cached one, so many deliveries refused with the same token cause one new fetch.
- A failed fetch raises :class:`TokenFailure` (a one-line error naming the token URL and
  what went wrong; never the client secret nor a token) to every delivery waiting on it,
  and to every delivery asking within :data:`FAILURE_HOLD` seconds after it, so a burst of
  deliveries does not hammer a token endpoint that is down. Never anything else: no
  exception escapes but :class:`TokenFailure` and cancellation.
- The request (RFC 6749 section 4.4): ``POST`` of the form ``grant_type=client_credentials``
  (plus ``scope`` when set), client authentication ``client_secret_basic`` (section 2.3.1:
  client id and secret form-urlencoded, then HTTP Basic), ``Accept: application/json``;
  redirects are not followed; at most :data:`BODY_CAP` bytes of the answer are read. It goes
  through the worker's transport session, so its connection is pinned to addresses the
  SSRF guard checked, exactly like a delivery's (:mod:`.pinning`).
- The answer must be 2xx JSON with a non-empty string ``access_token`` and, when present,
  ``token_type`` ``Bearer`` (any case) and a positive ``expires_in``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote_plus

import aiohttp
from yarl import URL

from outbox._security.ssrf import blocked_reason
from outbox.delivery.outcome import AttemptResult, Verdict, classify_exception

DEFAULT_EXPIRES_IN = 300.0
FAILURE_HOLD = 1.0
BODY_CAP = 65536
CACHE_MAX = 4096


def refresh_margin(expires_in: float) -> float:
    """How long before expiry a token is replaced: a tenth of its life, at most 30 s."""
    return min(30.0, expires_in / 10.0)


@dataclass(frozen=True, slots=True)
class Client:
    """One endpoint's OAuth2 client credentials: the cache key."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None


class TokenFailure(Exception):
    """The token endpoint gave no usable token; ``str()`` is one readable line."""

    def result(self, duration_ms: float) -> AttemptResult:
        """The failed attempt this makes: DEAD "ssrf" if the SSRF guard refused the token
        URL's address (as for an endpoint URL), else RETRY "oauth2_token"."""
        blocked = blocked_reason(self)
        return AttemptResult(
            verdict=Verdict.DEAD if blocked else Verdict.RETRY, status_code=None,
            duration_ms=duration_ms, error_class="ssrf" if blocked else "oauth2_token",
            error=str(self)[:300], response_excerpt=None, retry_after_seconds=None)


class Session(Protocol):
    """What a fetch needs of the worker's transport (:class:`~.sender.Transport`)."""

    def session(self) -> aiohttp.ClientSession: ...

    def target(self, url: str) -> URL: ...


@dataclass(slots=True)
class _Entry:
    token: str | None = None
    expires_at: float = 0.0
    fetch: asyncio.Task[str] | None = None
    failure: TokenFailure | None = None
    failed_at: float = 0.0


class TokenCache:
    """The access tokens of this process (see module guarantees)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[Client, _Entry] = {}
        self.fetches = 0  # token requests sent (for tests and metrics)

    async def token(self, client: Client, transport: Session, timeout: float) -> str:
        """A valid access token of ``client``; the fetch, if one is needed, is bounded by
        ``timeout`` seconds. Raises :class:`TokenFailure`."""
        entry = self._entries.get(client)
        now = self._clock()
        if entry is None:
            if len(self._entries) >= CACHE_MAX:
                self._entries = {c: e for c, e in self._entries.items() if e.fetch}
            entry = self._entries[client] = _Entry()
        if entry.token is not None and now < entry.expires_at:
            return entry.token
        if entry.fetch is None:
            if entry.failure is not None and now - entry.failed_at < FAILURE_HOLD:
                raise entry.failure
            entry.fetch = asyncio.get_running_loop().create_task(
                self._fetch(client, entry, transport, timeout))
            entry.fetch.add_done_callback(_retrieved)
        return await asyncio.shield(entry.fetch)

    def invalidate(self, client: Client, token: str) -> None:
        """Forget ``token`` if it is still ``client``'s cached one (a receiver refused it)."""
        entry = self._entries.get(client)
        if entry is not None and entry.token == token:
            entry.token = None

    async def _fetch(self, client: Client, entry: _Entry, transport: Session,
                     timeout: float) -> str:
        started = self._clock()
        self.fetches += 1
        try:
            token, expires_in = await _request(client, transport, timeout)
        except TokenFailure as exc:
            entry.failure, entry.failed_at, entry.token = exc, self._clock(), None
            raise
        finally:
            entry.fetch = None
        entry.token, entry.failure = token, None
        entry.expires_at = started + expires_in - refresh_margin(expires_in)
        return token


def _retrieved(task: asyncio.Task[str]) -> None:
    """Mark a fetch's failure seen, even if every waiter was cancelled meanwhile."""
    if not task.cancelled():
        task.exception()


async def _read(content: aiohttp.StreamReader) -> bytes:
    body = bytearray()
    while len(body) < BODY_CAP:
        chunk = await content.readany()
        if not chunk:
            break
        body += chunk
    return bytes(body[:BODY_CAP])


async def _request(client: Client, transport: Session, timeout: float) -> tuple[str, float]:
    """POST the client-credentials grant; the token and its lifetime, or TokenFailure."""
    pair = f"{quote_plus(client.client_id)}:{quote_plus(client.client_secret)}"
    headers = {"authorization": "Basic " + base64.b64encode(pair.encode()).decode(),
               "accept": "application/json"}
    form = {"grant_type": "client_credentials"}
    if client.scope:
        form["scope"] = client.scope
    where = f"OAuth2 token request to {client.token_url}"
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            async with transport.session().request(
                "POST", transport.target(client.token_url), data=form, headers=headers,
                allow_redirects=False, timeout=aiohttp.ClientTimeout(total=None),
            ) as response:
                status = response.status
                body = await _read(response.content)
    except Exception as exc:  # network, TLS, SSRF, timeout: the same words as a delivery's
        seen = classify_exception(exc, (time.perf_counter() - started) * 1000.0)
        raise TokenFailure(f"{where} failed: {seen.error}") from exc
    return _parse(where, status, body, client)


def _parse(where: str, status: int, body: bytes, client: Client) -> tuple[str, float]:
    data: Any = None
    with contextlib.suppress(ValueError):
        data = json.loads(body)
    if not 200 <= status < 300:
        raise TokenFailure(f"{where}: HTTP {status}{_why(data, body, client)}")
    if not isinstance(data, dict):
        raise TokenFailure(f"{where}: the answer is not a JSON object"
                           f"{_why(None, body, client)}")
    token = data.get("access_token")
    if not isinstance(token, str) or not token or not token.isprintable():
        raise TokenFailure(f"{where}: the answer has no access_token")
    kind = data.get("token_type")
    if kind is not None and (not isinstance(kind, str) or kind.lower() != "bearer"):
        raise TokenFailure(f"{where}: token_type {str(kind)[:40]!r} is not Bearer")
    expires_in = data.get("expires_in", DEFAULT_EXPIRES_IN)
    try:
        seconds = float(expires_in)
    except (TypeError, ValueError):
        seconds = -1.0
    if not 0 < seconds < 10 * 365 * 86_400:
        raise TokenFailure(f"{where}: expires_in {str(expires_in)[:40]!r} is not a positive"
                           " number of seconds")
    return token, seconds


def _why(data: Any, body: bytes, client: Client) -> str:
    """``: <error> (<error_description>)`` of an RFC 6749 error answer, else an excerpt."""
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        text = data["error"]
        if isinstance(data.get("error_description"), str):
            text += f" ({data['error_description']})"
    else:
        text = body[:200].decode("utf-8", errors="replace")
    text = " ".join(text.split()).replace(client.client_secret, "***")
    return f": {text[:200]}" if text else ""
