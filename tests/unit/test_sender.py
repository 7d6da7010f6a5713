"""The HTTP sender against respx-mocked responses (the only mocking in the suite)."""

from __future__ import annotations

import asyncio
import gzip
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
import respx

from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.sender import DEFAULT_BODY_CAP, send

URL = "https://receiver.example/hook"
ELSEWHERE = "https://elsewhere.example/landing"
BODY = b'{"type":"order.paid"}'
TIMEOUT = httpx.Timeout(5.0, connect=2.0)


async def _send(total_timeout: float = 5.0, body_cap: int = DEFAULT_BODY_CAP) -> AttemptResult:
    # respx intercepts httpcore, the pool under httpx's own transport; the worker's
    # transport (make_transport) is exercised against real servers in tests/integration.
    async with httpx.AsyncHTTPTransport() as transport:
        return await send(
            transport,
            URL,
            BODY,
            {"webhook-id": "evt_1", "content-type": "application/json"},
            timeout=TIMEOUT,
            total_timeout=total_timeout,
            body_cap=body_cap,
        )


def _run(
    response: httpx.Response, *, total_timeout: float = 5.0, body_cap: int = DEFAULT_BODY_CAP
) -> tuple[AttemptResult, respx.Route]:
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=response)
        result = asyncio.run(_send(total_timeout, body_cap))
    return result, route


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
    result, route = _run(httpx.Response(status, text="" if status == 204 else "ok"))
    assert result.verdict is verdict
    assert result.status_code == status
    assert route.call_count == 1
    assert result.duration_ms > 0
    if verdict is Verdict.DELIVERED:
        assert result.error is None
        assert result.error_class is None
    else:
        assert result.error == f"HTTP {status}"
        assert result.error_class == "http_status"


def test_request_carries_body_headers_and_identity_encoding() -> None:
    _, route = _run(httpx.Response(200))
    request = route.calls.last.request
    assert request.content == BODY
    assert request.headers["webhook-id"] == "evt_1"
    assert request.headers["accept-encoding"] == "identity"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_dead_and_not_followed(status: int) -> None:
    with respx.mock(assert_all_called=False) as router:
        first = router.post(URL).mock(
            return_value=httpx.Response(status, headers={"location": ELSEWHERE})
        )
        target = router.route(url=ELSEWHERE).mock(return_value=httpx.Response(200))
        result = asyncio.run(_send())
        assert len(router.calls) == 1  # respx clears router.calls on exit
    assert result.verdict is Verdict.DEAD
    assert result.error_class == "redirect"
    assert result.error == f"redirect to {ELSEWHERE} (not followed)"
    assert first.call_count == 1
    assert target.call_count == 0


@pytest.mark.parametrize(
    ("header", "low", "high"),
    [
        ("120", 120.0, 120.0),
        ("-5", 0.0, 0.0),
        ("", None, None),
        ("in a bit", None, None),
    ],
)
def test_retry_after_values(header: str, low: float | None, high: float | None) -> None:
    result, _ = _run(httpx.Response(429, headers={"retry-after": header}))
    assert result.verdict is Verdict.RETRY
    if low is None or high is None:
        assert result.retry_after_seconds is None
    else:
        assert result.retry_after_seconds is not None
        assert low <= result.retry_after_seconds <= high


def test_retry_after_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=300), usegmt=True)
    result, _ = _run(httpx.Response(503, headers={"retry-after": when}))
    assert result.retry_after_seconds is not None
    assert 290.0 <= result.retry_after_seconds <= 300.0


def test_binary_body_gives_excerpt_without_crash() -> None:
    noise = random.Random(7).randbytes(4096)
    result, _ = _run(httpx.Response(500, content=noise))
    assert result.verdict is Verdict.RETRY
    assert result.response_excerpt
    assert len(result.response_excerpt) <= 4096


def test_empty_body_has_no_excerpt() -> None:
    result, _ = _run(httpx.Response(204))
    assert result.response_excerpt is None


@pytest.mark.parametrize(("size", "cap"), [(100_000, DEFAULT_BODY_CAP), (5000, 1000), (10, 0)])
def test_body_is_cut_at_cap(size: int, cap: int) -> None:
    result, _ = _run(httpx.Response(200, content=b"a" * size), body_cap=cap)
    assert len(result.response_excerpt or "") == min(size, cap)


def test_multibyte_char_cut_at_cap_is_replaced() -> None:
    result, _ = _run(httpx.Response(200, content="é".encode() * 10), body_cap=5)
    assert result.response_excerpt == "éé\ufffd"


def test_cap_applies_to_decoded_gzip_body() -> None:
    bomb = gzip.compress(b"\0" * 20_000_000)
    response = httpx.Response(200, content=bomb, headers={"content-encoding": "gzip"})
    result, _ = _run(response, body_cap=1000)
    assert result.verdict is Verdict.DELIVERED
    assert result.response_excerpt == "\0" * 1000


@pytest.mark.parametrize(
    ("exc", "error_class"),
    [
        (httpx.ConnectTimeout, "timeout"),
        (httpx.ReadTimeout, "timeout"),
        (httpx.ConnectError, "connect"),
        (httpx.RemoteProtocolError, "protocol"),
        (httpx.ReadError, "network"),
        (RuntimeError, "internal"),
    ],
)
def test_exceptions_become_retry(exc: type[Exception], error_class: str) -> None:
    with respx.mock() as router:
        router.post(URL).mock(side_effect=exc)
        result = asyncio.run(_send())
    assert result.verdict is Verdict.RETRY
    assert result.error_class == error_class
    assert result.status_code is None
    assert result.error
    assert exc.__name__ in result.error or result.error_class == "timeout"


async def _never_answers(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(30)
    return httpx.Response(200)  # pragma: no cover


def test_total_deadline_before_status_is_retry_timeout() -> None:
    with respx.mock(assert_all_called=False) as router:
        router.post(URL).mock(side_effect=_never_answers)
        result = asyncio.run(_send(total_timeout=0.2))
    assert result.verdict is Verdict.RETRY
    assert result.error_class == "timeout"
    assert result.error == "total timeout after 0.2s"  # 30 s early: the deadline fired
    # duration_ms covers the wait for the deadline (a lower bound, as a share of the
    # configured total: a sleep never ends early, and a loaded machine only adds to it)
    assert result.duration_ms >= 0.75 * 0.2 * 1000.0


class _Trickle(httpx.AsyncByteStream):
    """One byte every 50 ms, then optionally an error."""

    def __init__(self, count: int = 100, fail: Exception | None = None) -> None:
        self.count = count
        self.fail = fail

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            await asyncio.sleep(0.05)
            yield b"x"
        if self.fail is not None:
            raise self.fail


@pytest.mark.parametrize(
    ("status", "verdict", "error"),
    [
        (200, Verdict.DELIVERED, "body not fully read: total timeout"),
        (503, Verdict.RETRY, "HTTP 503; body not fully read: total timeout"),
    ],
)
def test_trickling_body_is_cut_by_total_deadline(status: int, verdict: Verdict, error: str) -> None:
    result, _ = _run(httpx.Response(status, stream=_Trickle()), total_timeout=0.3)
    assert result.verdict is verdict
    assert result.error == error
    assert result.response_excerpt
    assert len(result.response_excerpt) < 20  # of 100 bytes: the deadline cut the read


def test_body_error_after_status_keeps_status_verdict() -> None:
    fail = httpx.ReadError("connection reset")
    result, _ = _run(httpx.Response(200, stream=_Trickle(count=2, fail=fail)))
    assert result.verdict is Verdict.DELIVERED
    assert result.response_excerpt == "xx"
    assert result.error == "body not fully read: ReadError"


def test_cancellation_propagates() -> None:
    async def scenario() -> None:
        task = asyncio.create_task(_send(total_timeout=10.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with respx.mock(assert_all_called=False) as router:
        router.post(URL).mock(side_effect=_never_answers)
        asyncio.run(scenario())
