"""Classification of statuses and exceptions, Retry-After parsing, backoff bounds."""

from __future__ import annotations

import ssl
import statistics
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import httpx
import pytest

from outbox.delivery.outcome import (
    AttemptResult,
    Verdict,
    classify_exception,
    classify_status,
    parse_retry_after,
    retry_delay,
)

NOW = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)


def _status(status: int, **headers: str) -> AttemptResult:
    return classify_status(status, httpx.Headers(headers), "body", 12.5, now=NOW)


@pytest.mark.parametrize(
    ("status", "verdict", "error_class"),
    [
        *[(s, Verdict.DELIVERED, None) for s in (200, 201, 202, 204, 299)],
        *[(s, Verdict.RETRY, "http_status") for s in (500, 502, 503, 504, 599, 408, 425, 429)],
        (410, Verdict.GONE, "http_status"),
        *[(s, Verdict.DEAD, "http_status") for s in (400, 401, 403, 404, 405, 409, 413, 422)],
        *[(s, Verdict.DEAD, "redirect") for s in (300, 301, 302, 303, 304, 307, 308)],
        *[(s, Verdict.RETRY, "unexpected_status") for s in (100, 101, 199, 600, 999)],
    ],
)
def test_status_table(status: int, verdict: Verdict, error_class: str | None) -> None:
    result = _status(status)
    assert result.verdict is verdict
    assert result.error_class == error_class
    assert result.status_code == status
    assert result.duration_ms == 12.5
    assert result.response_excerpt == "body"
    if verdict is Verdict.DELIVERED:
        assert result.error is None
    else:
        assert result.error is not None
        assert "\n" not in result.error


def test_http_status_error_text() -> None:
    assert _status(503).error == "HTTP 503"


def test_redirect_records_location() -> None:
    result = _status(302, location="https://elsewhere.example/x")
    assert result.error == "redirect to https://elsewhere.example/x (not followed)"


def test_redirect_without_location() -> None:
    assert _status(301).error == "redirect to <no Location> (not followed)"


def test_redirect_location_is_capped() -> None:
    error = _status(301, location="https://x.example/" + "a" * 5000).error
    assert error is not None
    assert len(error) < 600


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-5", 0.0),
        ("99999999999", 99999999999.0),
        ("soon", None),
        ("", None),
        ("1e3", None),
        ("inf", None),
        ("nan", None),
        ("120, 60", None),
        (None, None),
    ],
)
def test_parse_retry_after_delta(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


@pytest.mark.parametrize(
    ("offset", "expected"),
    [(timedelta(seconds=300), 300.0), (timedelta(hours=-1), 0.0), (timedelta(0), 0.0)],
)
def test_parse_retry_after_http_date(offset: timedelta, expected: float) -> None:
    header = format_datetime(NOW + offset, usegmt=True)
    assert parse_retry_after(header, now=NOW) == expected


def test_parse_retry_after_date_without_zone_is_utc() -> None:
    assert parse_retry_after("Mon, 01 Jan 2024 12:01:00 -0000", now=NOW) == 60.0


def test_parse_retry_after_default_now_is_current_time() -> None:
    header = format_datetime(datetime.now(UTC) + timedelta(seconds=600), usegmt=True)
    parsed = parse_retry_after(header)
    assert parsed is not None
    assert 590.0 <= parsed <= 600.0


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
        ("-30", 0.0),
        ("tomorrow-ish", None),
    ],
)
def test_classify_status_parses_retry_after(header: str, expected: float | None) -> None:
    assert _status(429, **{"retry-after": header}).retry_after_seconds == expected


def test_classify_status_without_retry_after() -> None:
    assert _status(503).retry_after_seconds is None


def _request() -> httpx.Request:
    return httpx.Request("POST", "https://receiver.example/hook")


@pytest.mark.parametrize(
    ("exc", "error_class", "error_start"),
    [
        (httpx.ConnectTimeout("x", request=_request()), "timeout", "connect timeout after 2.5s"),
        (httpx.ReadTimeout("x", request=_request()), "timeout", "read timeout after 2.5s"),
        (httpx.WriteTimeout("x", request=_request()), "timeout", "write timeout after 2.5s"),
        (httpx.PoolTimeout("x", request=_request()), "timeout", "pool timeout after 2.5s"),
        (TimeoutError(), "timeout", "timeout after 2.5s"),
        (httpx.ConnectError("refused", request=_request()), "connect", "ConnectError: refused"),
        (httpx.RemoteProtocolError("eof", request=_request()), "protocol", "RemoteProtocolError"),
        (httpx.LocalProtocolError("bad", request=_request()), "protocol", "LocalProtocolError"),
        (httpx.ReadError("reset", request=_request()), "network", "ReadError: reset"),
        (httpx.WriteError("pipe", request=_request()), "network", "WriteError: pipe"),
        (httpx.CloseError("x", request=_request()), "network", "CloseError"),
        (httpx.ProxyError("x", request=_request()), "transport", "ProxyError"),
        (httpx.UnsupportedProtocol("ftp", request=_request()), "transport", "UnsupportedProtocol"),
        (httpx.DecodingError("gz", request=_request()), "decoding", "DecodingError: gz"),
        (RuntimeError("boom"), "internal", "RuntimeError: boom"),
        (RuntimeError(), "internal", "RuntimeError"),
        (KeyError("k"), "internal", "KeyError"),
    ],
)
def test_classify_exception(exc: BaseException, error_class: str, error_start: str) -> None:
    result = classify_exception(exc, 2500.0)
    assert result.verdict is Verdict.RETRY
    assert result.error_class == error_class
    assert result.error is not None
    assert result.error.startswith(error_start)
    assert result.status_code is None
    assert result.duration_ms == 2500.0
    assert result.response_excerpt is None
    assert result.retry_after_seconds is None


def test_connect_error_caused_by_ssl_is_tls() -> None:
    exc = httpx.ConnectError("handshake failed", request=_request())
    exc.__cause__ = ssl.SSLCertVerificationError("certificate verify failed")
    assert classify_exception(exc, 1.0).error_class == "tls"


def test_exception_error_is_one_capped_line() -> None:
    error = classify_exception(RuntimeError("a\nb" + "c" * 1000), 1.0).error
    assert error is not None
    assert "\n" not in error
    assert len(error) <= 300


BASE, CAP = 30.0, 21600.0
SAMPLES = 2000


def _window(attempt: int) -> float:
    """tenacity 9.2 wait_random_exponential: uniform(0, min(cap, base * 2**(attempt-1)))."""
    return min(CAP, BASE * 2.0 ** (attempt - 1))


def _samples(attempt: int, **kwargs: float) -> list[float]:
    return [retry_delay(attempt, base=BASE, cap=CAP, **kwargs) for _ in range(SAMPLES)]


@pytest.mark.parametrize("attempt", [1, 2, 5, 10, 11, 12, 40])
def test_retry_delay_stays_in_full_jitter_window(attempt: int) -> None:
    samples = _samples(attempt)
    window = _window(attempt)
    assert all(0.0 <= s <= window for s in samples)
    # P(max < 0.9 * window) = 0.9**2000: the whole window is used.
    assert max(samples) > 0.9 * window
    assert min(samples) < 0.1 * window


def test_retry_delay_mean_grows_until_cap() -> None:
    means = [statistics.fmean(_samples(a)) for a in range(1, 12)]
    assert means == sorted(means)
    for attempt, mean in enumerate(means, start=1):
        assert mean == pytest.approx(_window(attempt) / 2, rel=0.1)


@pytest.mark.parametrize("attempt", [11, 12, 100, 10_000])
def test_retry_delay_never_exceeds_cap(attempt: int) -> None:
    assert all(s <= CAP for s in _samples(attempt))


def test_retry_after_honoured() -> None:
    # window for attempt 1 is 30 s, so 120 s always wins.
    assert all(s == 120.0 for s in _samples(1, retry_after=120.0))


def test_retry_after_only_lengthens_the_wait() -> None:
    samples = _samples(8, retry_after=1.0)
    assert all(1.0 <= s <= _window(8) for s in samples)
    assert max(samples) > 0.9 * _window(8)


def test_retry_after_clamped() -> None:
    assert all(s == 3600.0 for s in _samples(1, retry_after=365 * 86400.0))
    assert retry_delay(1, base=BASE, cap=CAP, retry_after=1e9, retry_after_max=60.0) == 60.0
    assert retry_delay(1, base=BASE, cap=CAP, retry_after=float("inf")) == 3600.0


@pytest.mark.parametrize("retry_after", [0.0, -10.0, float("nan")])
def test_retry_after_zero_negative_nan_fall_back_to_backoff(retry_after: float) -> None:
    assert all(0.0 <= s <= BASE for s in _samples(1, retry_after=retry_after))


@pytest.mark.parametrize(
    ("attempt", "base", "cap"), [(0, 30.0, 60.0), (-1, 30.0, 60.0), (1, 0.0, 60.0), (1, 1.0, -1.0)]
)
def test_retry_delay_rejects_invalid_arguments(attempt: int, base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="invalid backoff"):
        retry_delay(attempt, base=base, cap=cap)


def test_documented_schedule_numbers() -> None:
    windows = [_window(a) for a in range(1, 12)]  # max_attempts=12 -> 11 waits
    assert windows[-1] == CAP
    assert sum(windows) == 52290.0
    assert sum(windows) / 2 == 26145.0


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (aiohttp.ServerDisconnectedError(), "network"),
        (aiohttp.ClientOSError(104, "reset"), "network"),
        (aiohttp.ClientPayloadError("truncated"), "protocol"),
        (aiohttp.ServerTimeoutError("slow"), "timeout"),
    ],
)
def test_aiohttp_cause_decides_the_class(cause: Exception, expected: str) -> None:
    # httpx-aiohttp maps every ClientConnectionError to ConnectTimeout: the cause is the truth
    wrapped = httpx.ConnectTimeout("mapped")
    wrapped.__cause__ = cause
    result = classify_exception(wrapped, 5.0)
    assert result.verdict is Verdict.RETRY
    assert result.error_class == expected
