"""Tables for people: rich on a terminal, plain aligned columns when piped."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from rich.console import Console
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
