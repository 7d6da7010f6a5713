"""The adaptive rate's one formula (migrations/0008_flow_control.sql, 0027_flow_slow_start.sql),
read by the claim's budget, the throttle's cut, the allowed-rate gauge and `endpoints show`."""

from __future__ import annotations

SLOW_START_MAX = 10
"""Slow start multiplies the rate of a first cut by at most this much (reached after 5.7 s
at 1.5x a second): the cut started from one process's share of the endpoint's traffic,
so up to about ten processes' worth. It grows with time, whether or not the traffic uses
it; bounded, a late signal cuts from at most 10x the first cut, not from 1.5^60 of it."""


def adaptive_rate(f: str) -> str:
    """SQL for the adaptive rate of the ``endpoint_flow`` row aliased ``f`` now: NULL when
    it does not apply (never cut, or 60 s since the last cut); else the rate it was cut to
    (``adaptive_rate``), grown since ``decreased_at`` by ``growth`` times a second while
    that is set (slow start, after a first cut made from one process's observation) up to
    :data:`SLOW_START_MAX` times, else by ``increase_per_second`` a second (linear, after
    a cut from a known rate)."""
    elapsed = f"EXTRACT(EPOCH FROM now() - {f}.decreased_at)::float8"
    return (f"CASE WHEN {f}.decreased_at > now() - interval '60 seconds'"
            f" THEN CASE WHEN {f}.growth IS NOT NULL"
            f" THEN {f}.adaptive_rate * least(power({f}.growth, least(greatest(0, {elapsed}), 60)),"
            f" {SLOW_START_MAX})"
            f" ELSE {f}.adaptive_rate + COALESCE({f}.increase_per_second, 0) * {elapsed}"
            " END END")
