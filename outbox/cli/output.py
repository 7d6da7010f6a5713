"""Tables for people: rich on a terminal, plain aligned columns when piped."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print rows under headers; never truncates a cell (ids must stay copyable)."""
    if sys.stdout.isatty():
        table = Table(*headers)
        for col in table.columns:
            col.no_wrap = True
            col.overflow = "fold"
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for line in [list(headers), *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def to_jsonable(value: Any) -> Any:
    """Dataclasses, datetimes, UUIDs and timedeltas as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def echo_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    click.echo(json.dumps(to_jsonable(value), indent=2))


def cut(text: str | None, width: int = 60) -> str:
    """One line of at most ``width`` characters for a table cell ("-" for nothing)."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def when(value: dt.datetime | None) -> str:
    """A timestamp for tables: UTC, to the second."""
    if value is None:
        return "-"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


class Bar:
    """A progress bar's handle: ``update(done, total)`` after each batch."""

    def __init__(self, progress: Progress, task: TaskID, description: str) -> None:
        self._progress = progress
        self._task = task
        self._phase = description

    def __call__(self, done: int, total: int | None) -> None:
        self._progress.update(self._task, completed=done, total=total)

    def step(self, phase: str, done: int, total: int | None) -> None:
        """Like calling the bar; a new ``phase`` first restarts it under that name."""
        if phase != self._phase:
            self._phase = phase
            self._progress.reset(self._task, description=phase, total=total)
        self(done, total)


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Bar]:
    """A rich progress bar on stderr while the block runs, only on a terminal (off one it
    stays silent and callers print a summary)."""
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console,
        disable=not console.is_terminal,
    )
    with bar:
        yield Bar(bar, bar.add_task(description, total=total), description)
