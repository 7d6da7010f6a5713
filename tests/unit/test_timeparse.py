"""Durations and times as operators type them."""

from __future__ import annotations

import datetime as dt

import pytest

from outbox.admin._timeparse import format_duration, parse_duration, parse_when

NOW = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 604800), ("1w", 604800),
     ("1h30m", 5400), ("1.5h", 5400), (" 2H ", 7200), ("0s", 0), ("PT2H", 7200),
     ("P7D", 604800), ("P1DT12H", 129600), ("PT0.5S", 0.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [("-2h", "negative"), ("2", "not a duration"), ("h", "not a duration"), ("", "not a"),
     ("2 h", "not a duration"), ("P", "not a duration"), ("PT", "not a duration"),
     ("2y", "not a duration"), ("99999w", "100 years"), ("1e3s", "not a duration")],
)
def test_bad_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2h", NOW - dt.timedelta(hours=2)), ("7d", NOW - dt.timedelta(days=7)),
     ("2024-04-30", dt.datetime(2024, 4, 30, tzinfo=dt.UTC)),
     ("2024-04-30T10:00", dt.datetime(2024, 4, 30, 10, tzinfo=dt.UTC)),
     ("2024-04-30T10:00:00Z", dt.datetime(2024, 4, 30, 10, tzinfo=dt.UTC)),
     ("2024-04-30T12:00:00+02:00", dt.datetime(2024, 4, 30, 10, tzinfo=dt.UTC))],
)
def test_points_in_time(text: str, expected: dt.datetime) -> None:
    assert parse_when(text, now=NOW) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("-2h", "without a sign"), ("yesterday", "neither a time ago"), ("2024-13-01", "ISO"),
    ("", "neither")])
def test_bad_points_in_time(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_when(text, now=NOW)


@pytest.mark.parametrize(("seconds", "text"), [
    (5, "5s"), (-3, "0s"), (600, "10m"), (3900, "1h05m"), (2 * 86400 + 4 * 3600, "2d04h")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert format_duration(dt.timedelta(seconds=seconds)) == text
