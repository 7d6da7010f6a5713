"""Server-rendered charts for the overview: plain numbers for an inline ``<svg>``, so the
page needs no JavaScript and loads nothing from elsewhere.

Each chart comes in two shapes (:data:`WIDE` and :data:`NARROW`); the stylesheet shows the
narrow one on phones, where the wide one would shrink its labels out of legibility.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from outbox.admin.activity import Minute

LEFT = 52.0  # room for the y-axis labels
BOTTOM = 22.0  # room for the x-axis labels
TOP = 10.0


@dataclass(frozen=True, slots=True)
class Size:
    """A chart's viewBox and how many minutes apart its time labels are."""

    width: float
    height: float
    label_every: int


WIDE = Size(960.0, 200.0, 15)
NARROW = Size(400.0, 240.0, 20)


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    y: float
    height: float
    label: str  # what a tooltip (<title>) says


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str
    anchor: str = "middle"  # SVG text-anchor: the last time label ends at the right edge


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart's geometry in a ``0 0 width height`` viewBox."""

    title: str
    summary: str
    bars: list[Bar]  # bar charts: delivered, with dead stacked on top in ``alt_bars``
    alt_bars: list[Bar]
    line: str  # line charts: an SVG polyline ``points`` attribute ("" for none)
    area: str  # the polygon under the line
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    width: float
    height: float
    left: float = LEFT

    @property
    def base(self) -> float:
        return self.height - BOTTOM


@dataclass(frozen=True, slots=True)
class _Frame:
    size: Size
    slot: float  # horizontal room per minute
    scale: float  # viewBox units per count
    y_ticks: list[Tick]
    x_ticks: list[Tick]

    @property
    def base(self) -> float:
        return self.size.height - BOTTOM


def nice_max(value: float) -> int:
    """The smallest 1/2/5 x 10^n at or above ``value`` (at least 1): a round axis top."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return int(step * power)
    return int(10 * power)  # pragma: no cover - the loop always returns


def _frame(points: Sequence[Minute], top: int, size: Size) -> _Frame:
    slot = (size.width - LEFT) / max(len(points), 1)
    scale = (size.height - BOTTOM - TOP) / top
    y_ticks = [Tick(size.height - BOTTOM - v * scale, f"{v:,}")
               for v in sorted({0, top // 2, top})]
    x_ticks = []
    if points:  # every label_every minutes from the first, and the last at the right edge
        x_ticks = [Tick(LEFT + i * slot + slot / 2, points[i].minute.strftime("%H:%M"))
                   for i in range(0, max(1, len(points) - size.label_every // 2),
                                  size.label_every)]
        x_ticks.append(Tick(size.width, points[-1].minute.strftime("%H:%M"), "end"))
    return _Frame(size, slot, scale, y_ticks, x_ticks)


def rate_chart(points: Sequence[Minute], size: Size = WIDE) -> Chart:
    """Deliveries finished per minute: delivered bars, dead stacked on top."""
    frame = _frame(points, nice_max(max((p.delivered + p.dead for p in points), default=0)),
                   size)
    bars, dead = [], []
    for i, p in enumerate(points):
        x, width = LEFT + i * frame.slot + frame.slot * 0.1, frame.slot * 0.8
        h_ok, h_dead = p.delivered * frame.scale, p.dead * frame.scale
        when = p.minute.strftime("%H:%M")
        bars.append(Bar(x, width, frame.base - h_ok, h_ok, f"{when}: {p.delivered} delivered"))
        if p.dead:
            dead.append(Bar(x, width, frame.base - h_ok - h_dead, h_dead,
                            f"{when}: {p.dead} dead"))
    summary = (f"{sum(p.delivered for p in points):,} delivered and "
               f"{sum(p.dead for p in points):,} dead in the last hour")
    return Chart("Delivery rate per minute", summary, bars, dead, "", "", frame.y_ticks,
                 frame.x_ticks, size.width, size.height)


def backlog_chart(points: Sequence[Minute], size: Size = WIDE) -> Chart:
    """Deliveries pending at the end of each minute, as a line over a filled area."""
    frame = _frame(points, nice_max(max((p.backlog for p in points), default=0)), size)
    coords = [(LEFT + i * frame.slot + frame.slot / 2, frame.base - p.backlog * frame.scale)
              for i, p in enumerate(points)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    area = ""
    if coords:
        area = f"{coords[0][0]:.1f},{frame.base:.1f} {line} {coords[-1][0]:.1f},{frame.base:.1f}"
    now = points[-1].backlog if points else 0
    peak = max((p.backlog for p in points), default=0)
    summary = f"backlog now {now:,}, peak {peak:,} in the last hour"
    return Chart("Backlog (pending deliveries)", summary, [], [], line, area, frame.y_ticks,
                 frame.x_ticks, size.width, size.height)
