"""Reads the web console needs beyond :mod:`outbox.admin.stats`: the last hour, minute by minute.

Read-only, one statement, cheap enough for every page view: it reads the rows pending now
and the rows finished in the last hour through their partial indexes, never the history.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated

__all__ = [
    "Minute",
    "last_hour",
]


@dataclass(frozen=True, slots=True)
class Minute:
    """One minute of the last hour: deliveries ``delivered`` and ``dead`` in it, and the
    ``backlog`` (deliveries pending, parked ones included) at its end."""

    minute: dt.datetime
    delivered: int
    dead: int
    backlog: int


def last_hour(conn: psycopg.Connection[Any], *, schema: str) -> list[Minute]:
    """The 60 minutes ending with the current one, oldest first (a minute with nothing in
    it is a row of zeros, so the result always has 60 rows)."""
    with translated(), conn.cursor(row_factory=class_row(Minute)) as cur:
        cur.execute(render(queries.CONSOLE_LAST_HOUR, schema))
        return cur.fetchall()
