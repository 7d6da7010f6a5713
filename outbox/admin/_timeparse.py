"""Durations and points in time as operators type them (stdlib only, no I/O).

Durations: one or more ``<number><unit>`` parts, units ``s``, ``m``, ``h``, ``d``, ``w``
(``90s``, ``30m``, ``2h``, ``7d``, ``1h30m``), or ISO 8601 durations such as ``PT2H`` /
``P7D``. Points in time: a duration means that long ago (``2h`` is two hours before now),
anything else is ISO 8601 (``2024-05-01``, ``2024-05-01T12:00``, ``...T12:00:00+02:00``,
``...Z``); a time without a UTC offset is taken as UTC.

Guarantees: every parser returns a value or raises ``ValueError`` with a one-line message
that names the input and shows an accepted form; nothing is ever negative.
"""

from __future__ import annotations

import datetime as dt
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_RELATIVE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")
_ISO_DURATION = re.compile(
    r"^P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)
_MAX = dt.timedelta(days=365 * 100)
EXAMPLES = "e.g. 90s, 30m, 2h, 7d, 1h30m or PT2H"


def parse_duration(text: str) -> dt.timedelta:
    """A non-negative duration (see module doc); ``ValueError`` otherwise."""
    raw = text.strip().lower() if isinstance(text, str) else ""
    if raw.startswith("-"):
        raise ValueError(f"{text!r} is negative: durations must be positive ({EXAMPLES})")
    if _RELATIVE.match(raw):
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(raw))
    else:
        iso = _ISO_DURATION.match(raw.upper())
        if iso is None or raw.upper() in ("P", "PT") or raw.upper().endswith("T"):
            raise ValueError(f"{text!r} is not a duration ({EXAMPLES})")
        parts = {k: float(v) for k, v in iso.groupdict().items() if v is not None}
        seconds = sum(parts.get(k, 0.0) * _UNITS[k.lower()] for k in "wdhms")
    if seconds > _MAX.total_seconds():
        raise ValueError(f"{text!r} is longer than 100 years")
    return dt.timedelta(seconds=seconds)


def parse_when(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """An aware UTC-comparable datetime: ``now - duration`` or an ISO 8601 timestamp."""
    raw = text.strip() if isinstance(text, str) else ""
    reference = now or dt.datetime.now(dt.UTC)
    if _RELATIVE.match(raw.lower()):
        return reference - parse_duration(raw)
    if raw.startswith("-"):
        raise ValueError(f"{text!r}: write a time ago without a sign, e.g. 2h")
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a time ago ({EXAMPLES}) nor an ISO 8601 time "
            "(e.g. 2024-05-01T12:00:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def format_duration(delta: dt.timedelta | float) -> str:
    """A short human form: ``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    seconds = int(delta.total_seconds() if isinstance(delta, dt.timedelta) else delta)
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
