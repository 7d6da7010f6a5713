"""What one HTTP delivery attempt means, and when to try again. Pure: no I/O.

Status classification::

    2xx                        DELIVERED
    5xx, 408, 425, 429         RETRY    error_class "http_status"
    410                        GONE     dead, and the endpoint must be disabled
    300-399                    DEAD     error_class "redirect"; never followed, Location in `error`
    other 4xx                  DEAD     error_class "http_status"
    <200 or >599               RETRY    error_class "unexpected_status"

A broker delivery (:mod:`outbox.delivery.transports`) has no status: it is DELIVERED
(:func:`delivered`) once the broker accepted the message, else its failure goes through
:func:`classify_attempt` like an HTTP exchange that got no status line: a
:class:`BrokerFailure` keeps its ``error_class`` (RETRY), the SSRF guard's refusal is DEAD.

A final status outside 200-599 is a broken receiver, not a refusal, so it is retried
(``max_attempts`` bounds the cost). The HTTP client (aiohttp) consumes interim 1xx
responses itself; a 1xx reaching us is such a protocol anomaly.

Guarantees: neither classifier raises for any input; every non-DELIVERED result has a
non-None ``error_class`` and a one-line ``error``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import ssl
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

import aiohttp
import tenacity

from outbox._security.ssrf import ResolutionFailed, blocked_reason
from outbox.delivery import http1


class Verdict(StrEnum):
    """The delivery state an attempt leads to."""

    DELIVERED = "delivered"
    RETRY = "retry"
    DEAD = "dead"
    GONE = "gone"
    """Dead, and the endpoint must be disabled (HTTP 410, Standard Webhooks)."""


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """One attempt, as recorded in ``delivery_attempts``.

    ``status_code`` is None when no response status was received. ``error_class`` is a
    short stable snake_case name (None when delivered cleanly); ``error`` is one line.
    ``retry_after_seconds`` is the parsed ``Retry-After`` header, >= 0 and unclamped,
    None when absent or unparseable.
    """

    verdict: Verdict
    status_code: int | None
    duration_ms: float
    error_class: str | None
    error: str | None
    response_excerpt: str | None
    retry_after_seconds: float | None


class BrokerFailure(Exception):
    """A broker did not take a message: ``error_class`` is ``broker_auth`` (credentials
    refused), ``broker_refused`` (no such exchange or stream, a nack, an unroutable
    message, a wrong key type), ``broker_connect`` (no connection) or ``broker_client``
    (the client library is not installed). A RETRY like any transport failure:
    ``max_attempts`` then dead-letters it, and a replay after the fix delivers."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


def delivered(duration_ms: float, receipt: str | None) -> AttemptResult:
    """A clean delivery without an HTTP status (a broker's acceptance, ``receipt``)."""
    return AttemptResult(verdict=Verdict.DELIVERED, status_code=None, duration_ms=duration_ms,
                         error_class=None, error=None, response_excerpt=receipt,
                         retry_after_seconds=None)


_RETRY_STATUSES = frozenset({408, 425, 429})
_LOCATION_CAP = 512
_DELTA_SECONDS = re.compile(r"-?\d+(?:\.\d+)?")


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date).

    Returns a finite value >= 0 (past dates and negative deltas give 0), or None when
    the value is absent or not understood. Dates without a zone are taken as UTC.
    """
    if value is None:
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        seconds = float(text)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    reference = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - reference).total_seconds())


def _one_line(text: str, cap: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= cap else flat[: cap - 3] + "..."


def _status_verdict(status: int) -> tuple[Verdict, str | None]:
    if 200 <= status <= 299:
        return Verdict.DELIVERED, None
    if status == 410:
        return Verdict.GONE, "http_status"
    if 500 <= status <= 599 or status in _RETRY_STATUSES:
        return Verdict.RETRY, "http_status"
    if 300 <= status <= 399:
        return Verdict.DEAD, "redirect"
    if 400 <= status <= 499:
        return Verdict.DEAD, "http_status"
    return Verdict.RETRY, "unexpected_status"


def classify_status(
    status: int,
    headers: Mapping[str, str],
    excerpt: str | None,
    duration_ms: float,
    *,
    now: datetime | None = None,
) -> AttemptResult:
    """Classify a received response status (table in the module docstring).

    ``Retry-After`` is parsed whatever the status; only RETRY results are meant to use it.
    For 3xx the ``Location`` target (flattened to one line, capped) is named in ``error``.
    """
    verdict, error_class = _status_verdict(status)
    error: str | None = None
    if error_class == "redirect":
        location = headers.get("location")
        target = _one_line(location, _LOCATION_CAP) if location else "<no Location>"
        error = f"redirect to {target} (not followed)"
    elif error_class is not None:
        error = f"HTTP {status}"
    return AttemptResult(
        verdict=verdict,
        status_code=status,
        duration_ms=duration_ms,
        error_class=error_class,
        error=error,
        response_excerpt=excerpt,
        retry_after_seconds=parse_retry_after(headers.get("retry-after"), now=now),
    )


_TIMEOUT_NAMES = {"ConnectTimeout": "connect", "ReadTimeout": "read",
                  "WriteTimeout": "write", "PoolTimeout": "pool"}


def _caused_by_tls(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__module__ == "ssl":
            return True
        current = current.__cause__ or current.__context__
    return False


def _tls_below(exc: BaseException) -> bool:
    """An ``ssl.SSLError`` caused ``exc`` (a connection refused by the TLS handshake)."""
    cause = exc.__cause__
    return isinstance(cause, ssl.SSLError)


def _aiohttp_class(exc: BaseException) -> str | None:
    """The class of an HTTP client error in ``exc``'s cause chain: the worker's transport
    (:mod:`outbox.delivery.http1`), or aiohttp's (OAuth2 token requests)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, aiohttp.ClientConnectorCertificateError | ssl.SSLError):
            return "tls"
        if isinstance(current, aiohttp.ServerTimeoutError | aiohttp.SocketTimeoutError
                      | http1.ReadTimedOut | http1.ConnectTimedOut):
            return "timeout"
        if isinstance(current, aiohttp.ClientConnectorError | http1.ConnectFailed) \
                and not _tls_below(current):
            return "connect"
        if isinstance(current, aiohttp.ClientResponseError | aiohttp.ClientPayloadError
                      | http1.ResponseInvalid):
            return "protocol"
        if isinstance(current, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError
                      | http1.Disconnected):
            return "network"
        current = current.__cause__ or current.__context__
    return None


def _httpx_class(exc: BaseException, seconds: float) -> tuple[str, str] | None:
    """httpx's exception tree, for callers that send with httpx (the worker does not):
    an httpx error can only exist once httpx was imported, so it is not imported here."""
    if "httpx" not in sys.modules:
        return None
    import httpx

    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", f"{_TIMEOUT_NAMES.get(name, 'request')} timeout after {seconds:.1f}s"
    if isinstance(exc, httpx.ConnectError):
        return ("tls" if _caused_by_tls(exc) else "connect"), f"{name}: {exc}"
    if isinstance(exc, httpx.ProtocolError):
        return "protocol", f"{name}: {exc}"
    if isinstance(exc, httpx.NetworkError):
        return "network", f"{name}: {exc}"
    if isinstance(exc, httpx.DecodingError):
        return "decoding", f"{name}: {exc}"
    if isinstance(exc, httpx.TransportError):
        return "transport", f"{name}: {exc}"
    return None


def _exception_class(exc: BaseException, seconds: float) -> tuple[str, str]:
    name = type(exc).__name__
    if isinstance(exc, BrokerFailure):
        return exc.error_class, str(exc)
    via_aiohttp = _aiohttp_class(exc)
    if via_aiohttp == "timeout":
        return "timeout", f"timeout after {seconds:.1f}s"
    if via_aiohttp is not None:
        return via_aiohttp, f"{name}: {exc}"
    via_httpx = _httpx_class(exc, seconds)
    if via_httpx is not None:
        return via_httpx
    if isinstance(exc, TimeoutError):
        return "timeout", f"timeout after {seconds:.1f}s"
    if isinstance(exc, ResolutionFailed):
        return "dns", str(exc)
    return "internal", f"{name}: {exc}"


def classify_exception(exc: BaseException, duration_ms: float) -> AttemptResult:
    """Classify an attempt that ended in an exception before a status was received.

    RETRY (``max_attempts`` bounds a permanent fault), except a refusal by the SSRF guard
    (:class:`~outbox._security.ssrf.BlockedAddress` anywhere in the cause chain): DEAD "ssrf".
    Never raises. Mapping over httpx 0.28's tree::

        TransportError
        ├── TimeoutException                    "timeout"  (also builtin TimeoutError)
        │   └── ConnectTimeout, ReadTimeout, WriteTimeout, PoolTimeout
        ├── NetworkError
        │   ├── ConnectError                    "connect"  ("tls" if an ssl error caused it)
        │   └── ReadError, WriteError, CloseError  "network"
        ├── ProtocolError                       "protocol"
        │   └── LocalProtocolError, RemoteProtocolError
        └── ProxyError, UnsupportedProtocol     "transport"
        DecodingError                           "decoding"
        ssrf.ResolutionFailed                   "dns"
        BrokerFailure                           its error_class ("broker_auth"...)

    The worker's sender (:mod:`outbox.delivery.sender`) raises aiohttp's own errors;
    an aiohttp error anywhere in the cause chain (also under an httpx wrapper such as
    ``httpx-aiohttp``'s coarse mapping) decides first: certificate/SSL "tls",
    server/socket timeouts "timeout", connector errors "connect", bad responses/payloads
    "protocol", disconnects and OS errors "network".
        anything else                           "internal" (error names the type)

    ``TooManyRedirects`` cannot occur (redirects are never followed) and would be
    "internal". ``error`` is one line, at most 300 characters.
    """
    blocked = blocked_reason(exc)
    if blocked is not None:  # the SSRF guard: permanent until the URL or allowlist changes
        verdict, verdict_class, message = Verdict.DEAD, "ssrf", blocked
    else:
        verdict = Verdict.RETRY
        verdict_class, message = _exception_class(exc, duration_ms / 1000.0)
    return AttemptResult(
        verdict=verdict,
        status_code=None,
        duration_ms=duration_ms,
        error_class=verdict_class,
        error=_one_line(message.rstrip(": ") or type(exc).__name__, 300),
        response_excerpt=None,
        retry_after_seconds=None,
    )


def classify_attempt(
    status: int | None,
    headers: Mapping[str, str],
    body: bytes,
    failure: BaseException | None,
    *,
    expired: bool,
    total_timeout: float,
    duration_ms: float,
) -> AttemptResult:
    """The verdict on one exchange, from what arrived: ``status`` (None: no status line),
    its ``headers``, the kept ``body`` bytes, the exception that ended it early if any,
    and whether the total deadline (``total_timeout`` seconds) fired.

    No status: RETRY "timeout" ``"total timeout after Ns"`` if the deadline fired, else
    :func:`classify_exception` of ``failure``. A status: :func:`classify_status`, whatever
    happened while reading the body; such a failure (or the deadline) is noted in
    ``error`` (``"body not fully read: <cause>"``). The excerpt is ``body`` as UTF-8,
    invalid bytes replaced; None if empty. Never raises.
    """
    if status is None:
        if expired:
            return AttemptResult(
                verdict=Verdict.RETRY, status_code=None, duration_ms=duration_ms,
                error_class="timeout", error=f"total timeout after {total_timeout:.1f}s",
                response_excerpt=None, retry_after_seconds=None)
        return classify_exception(failure or RuntimeError("no response"), duration_ms)
    excerpt = body.decode("utf-8", errors="replace") if body else None
    result = classify_status(status, headers, excerpt, duration_ms)
    if failure is None and not expired:
        return result
    cause = "total timeout" if expired else type(failure).__name__
    note = f"body not fully read: {cause}"
    return dataclasses.replace(result, error=f"{result.error}; {note}" if result.error else note)


_RETRYING = tenacity.Retrying()


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    retry_after_max: float = 3600.0,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    Full jitter via ``tenacity.wait_random_exponential(multiplier=base, max=cap)``:
    ``uniform(0, min(cap, base * 2 ** (attempt - 1)))`` (tenacity 9.2 returns ``cap``
    as the window once ``attempt - 1 > log2(cap / base)``, so large attempts never
    overflow). The result is in ``[0, cap]``. If ``retry_after`` is given the result is
    ``max(jittered, min(max(retry_after, 0), retry_after_max))``: honoured, but clamped
    (a NaN ``retry_after`` is ignored).

    Schedule with base=30 s, cap=6 h, max_attempts=12 (11 waits, after attempts 1..11):
    windows 30 s, 1, 2, 4, 8, 16, 32, 64, 128, 256 min, then 6 h (the cap binds from
    attempt 11). Sum of windows 52 290 s = 14.5 h, the worst case; the expected total is
    half, 26 145 s = 7.3 h (sd about 2.2 h). It does not span a day: that needs about
    max_attempts=17 (22.3 h expected) at this base and cap.

    Raises ValueError if ``attempt < 1``, ``base <= 0`` or ``cap < 0``.
    """
    if attempt < 1 or base <= 0 or cap < 0:
        raise ValueError(f"invalid backoff: attempt={attempt} base={base} cap={cap}")
    state = tenacity.RetryCallState(retry_object=_RETRYING, fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    jittered = tenacity.wait_random_exponential(multiplier=base, max=cap)(state)
    if retry_after is None or math.isnan(retry_after):
        return jittered
    return max(jittered, min(max(retry_after, 0.0), retry_after_max))
