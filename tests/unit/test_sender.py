"""The sender's verdict on an exchange (``outcome.classify_attempt``), a pure function.

What ``send`` does on the wire (one request, headers, caps, decompression, timeouts,
errors while reading the body, cancellation) is tested against real receivers on
127.0.0.1 in ``tests/integration/test_sender_transport.py``; this file checks how what
arrived becomes an ``AttemptResult``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from outbox._security.ssrf import BlockedAddress, ip_literal
from outbox.delivery.outcome import AttemptResult, Verdict, classify_attempt

ELSEWHERE = "https://elsewhere.example/landing"


def _headers(**values: str) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in values.items()}))


def _verdict(status: int | None, body: bytes = b"", failure: BaseException | None = None,
             *, expired: bool = False, **headers: str) -> AttemptResult:
    return classify_attempt(status, _headers(**headers), body, failure, expired=expired,
                            total_timeout=0.3, duration_ms=12.5)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        *[(s, Verdict.DELIVERED) for s in (200, 201, 204)],
        *[(s, Verdict.RETRY) for s in (500, 502, 503, 504, 408, 425, 429)],
        (410, Verdict.GONE),
        *[(s, Verdict.DEAD) for s in (400, 401, 403, 404, 422)],
    ],
)
def test_status_verdicts(status: int, verdict: Verdict) -> None:
    result = _verdict(status, b"ok")
    assert result.verdict is verdict
    assert result.status_code == status
    assert result.duration_ms == 12.5
    assert result.response_excerpt == "ok"
    if verdict is Verdict.DELIVERED:
        assert result.error is None
        assert result.error_class is None
    else:
        assert result.error == f"HTTP {status}"
        assert result.error_class == "http_status"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_dead_and_names_its_target(status: int) -> None:
    result = _verdict(status, location=ELSEWHERE)
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "redirect")
    assert result.error == f"redirect to {ELSEWHERE} (not followed)"


@pytest.mark.parametrize(
    ("header", "expected"), [("120", 120.0), ("-5", 0.0), ("", None), ("in a bit", None)])
def test_retry_after_values(header: str, expected: float | None) -> None:
    result = _verdict(429, retry_after=header)
    assert result.verdict is Verdict.RETRY
    assert result.retry_after_seconds == expected


def test_retry_after_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=300), usegmt=True)
    result = _verdict(503, retry_after=when)
    assert result.retry_after_seconds is not None
    assert 290.0 <= result.retry_after_seconds <= 300.0


def test_binary_body_gives_excerpt_without_crash() -> None:
    result = _verdict(500, random.Random(7).randbytes(4096))
    assert result.verdict is Verdict.RETRY
    assert result.response_excerpt
    assert len(result.response_excerpt) <= 4096


def test_empty_body_has_no_excerpt() -> None:
    assert _verdict(204).response_excerpt is None


def test_multibyte_char_cut_is_replaced() -> None:
    assert _verdict(200, "é".encode() * 2 + b"\xc3").response_excerpt == "éé\ufffd"


def test_deadline_before_status_is_retry_timeout() -> None:
    result = _verdict(None, failure=TimeoutError(), expired=True)
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, "timeout", None)
    assert result.error == "total timeout after 0.3s"
    assert result.response_excerpt is None


@pytest.mark.parametrize(
    ("exc", "error_class"),
    [
        (aiohttp.ConnectionTimeoutError("connect"), "timeout"),
        (aiohttp.SocketTimeoutError("read"), "timeout"),
        (aiohttp.ServerDisconnectedError(), "network"),
        (aiohttp.ClientPayloadError("truncated"), "protocol"),
        (RuntimeError("boom"), "internal"),
    ],
)
def test_exception_before_status_is_retry(exc: Exception, error_class: str) -> None:
    result = _verdict(None, failure=exc)
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, error_class, None)
    assert result.error
    assert type(exc).__name__ in result.error or error_class == "timeout"


def test_refusal_by_the_ssrf_guard_is_dead() -> None:
    address = ip_literal("10.0.0.1")
    assert address is not None
    result = _verdict(None, failure=BlockedAddress("10.0.0.1", address, "private"))
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf")


def test_no_status_and_no_exception_is_still_a_result() -> None:
    result = _verdict(None)
    assert (result.verdict, result.error_class) == (Verdict.RETRY, "internal")


@pytest.mark.parametrize(
    ("status", "verdict", "error"),
    [
        (200, Verdict.DELIVERED, "body not fully read: total timeout"),
        (503, Verdict.RETRY, "HTTP 503; body not fully read: total timeout"),
    ],
)
def test_deadline_while_reading_body_keeps_status_verdict(
    status: int, verdict: Verdict, error: str
) -> None:
    result = _verdict(status, b"xx", TimeoutError(), expired=True)
    assert result.verdict is verdict
    assert result.error == error
    assert result.response_excerpt == "xx"


def test_body_error_after_status_keeps_status_verdict() -> None:
    result = _verdict(200, b"xx", aiohttp.ClientPayloadError("reset"))
    assert result.verdict is Verdict.DELIVERED
    assert result.response_excerpt == "xx"
    assert result.error == "body not fully read: ClientPayloadError"
