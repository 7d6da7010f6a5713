"""What every driver edge provides, and what they share: statement translation and errors.

A *runner* wraps one caller's handle (a psycopg2 connection, an asyncpg connection, a
SQLAlchemy session, a Django cursor ...) and offers exactly what emit needs: a transaction
check that raises :class:`~outbox.errors.NotInTransaction` before any SQL, and two ways to
run a statement, each raising only :class:`~outbox.errors.OutboxError` subclasses.

The SQL is written once, in :mod:`outbox._db.queries`, with psycopg's placeholders
(``%s`` / ``%(name)s``, ``%%`` for a literal ``%``). :func:`bind` translates it, once per
statement, to the other paramstyle a runner may need (``$n``, asyncpg's), and turns
``uuid.UUID`` values into text: every portable path binds ids as text and lets the
statement's own column or cast type them, so no caller's adapter or codec registration
(or lack of one) changes what is written.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Literal, Protocol

from outbox.errors import (
    DatabaseError,
    DatabaseUnavailable,
    NotInTransaction,
    OutboxError,
    SchemaMissing,
)

Style = Literal["pyformat", "dollar"]
Params = Sequence[Any] | Mapping[str, Any]

FAILED_TRANSACTION = (
    "the connection's transaction has failed: roll back before emitting"
)


class SyncRunner(Protocol):
    """A caller's synchronous handle, seen by emit.

    ``prepare_threshold`` (``OUTBOX_PREPARE_THRESHOLD``, set by emit) is for runners whose
    driver does not prepare statements by itself (:mod:`outbox._emit.drivers.dbapi`); the others
    ignore it (asyncpg and psycopg 3 under SQLAlchemy prepare on their own)."""

    style: Style
    prepare_threshold: int | None

    def check(self) -> None:
        """Raise NotInTransaction unless a statement would run in the caller's transaction."""

    def run(self, query: str, params: Params) -> None:
        """Execute one statement; discard its rows."""

    def rows(self, query: str, params: Params) -> list[tuple[Any, ...]]:
        """Execute one statement; its rows as tuples."""


class AsyncRunner(Protocol):
    """A caller's asynchronous handle, seen by emit_async."""

    style: Style
    prepare_threshold: int | None

    async def check(self) -> None: ...

    async def run(self, query: str, params: Params) -> None: ...

    async def rows(self, query: str, params: Params) -> list[tuple[Any, ...]]: ...


_TOKEN = re.compile(r"%%|%\((\w+)\)s|%s|::json\b")


@lru_cache(maxsize=256)
def to_dollar(query: str) -> tuple[str, tuple[str, ...] | int]:
    """``query`` with ``$n`` placeholders, and the parameter names in ``$n`` order (named
    parameters) or their count (positional ones). A ``::json`` cast becomes
    ``::text::json``: the value is bound as text, whatever json codec the connection has."""
    names: list[str] = []
    positional = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal positional
        token = match.group(0)
        if token == "%%":
            return "%"
        if token == "::json":
            return "::text::json"
        if token == "%s":
            positional += 1
            return f"${positional}"
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    text = _TOKEN.sub(sub, query)
    if names and positional:
        raise ValueError("a statement mixes %s and %(name)s placeholders")
    return text, tuple(names) if names else positional


def _as_text(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list) and value and isinstance(value[0], uuid.UUID):
        return [str(v) for v in value]
    return value


def bind(style: Style, query: str, params: Params) -> tuple[str, Any]:
    """``(sql, parameters)`` for a runner of ``style``: psycopg's statement and a dict or
    tuple (pyformat), or the ``$n`` statement and a positional list (dollar)."""
    if isinstance(params, Mapping):
        values: Params = {k: _as_text(v) for k, v in params.items()}
    else:
        values = [_as_text(v) for v in params]
    if style == "pyformat":
        return query, values if isinstance(values, Mapping) else tuple(values)
    text, order = to_dollar(query)
    if isinstance(order, int):
        return text, list(values)
    assert isinstance(values, Mapping)
    return text, [values[name] for name in order]


def as_tuples(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Rows as tuples, whether the driver made tuples, records or dicts."""
    return [tuple(r.values()) if isinstance(r, Mapping) else tuple(r) for r in rows]


def as_uuid(value: Any) -> uuid.UUID | None:
    """A driver's uuid (``uuid.UUID``, asyncpg's own UUID, or text) as ``uuid.UUID``."""
    if value is None or type(value) is uuid.UUID:
        return value
    return uuid.UUID(str(value))


def _sqlstate(exc: BaseException) -> str | None:
    seen: BaseException | None = exc
    while seen is not None:
        state = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if isinstance(state, str):
            return state
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


def _message(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) or getattr(exc, "message", None)
    if isinstance(primary, str) and primary:
        return primary
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _root(exc: BaseException) -> BaseException:
    """The driver's own error under an ORM's wrappers (SQLAlchemy's ``orig``, Django's and
    SQLAlchemy's asyncpg adapter's ``__cause__``)."""
    for _ in range(5):
        orig = getattr(exc, "orig", None)
        below = orig if isinstance(orig, BaseException) else exc.__cause__
        if below is None:
            break
        exc = below
    return exc


def translate(exc: BaseException, *, connection_error: bool = False) -> OutboxError:
    """A driver's database error as an :mod:`outbox.errors` one, by SQLSTATE.

    ``connection_error``: the driver classed it as a connection failure (no SQLSTATE)."""
    root = _root(exc)
    state = _sqlstate(exc)
    message = _message(root)
    if state == "42P01":
        return SchemaMissing(f"outbox tables not found ({message}): run `outbox migrate`")
    if state == "3F000":
        return SchemaMissing(f"outbox schema not found ({message}): run `outbox migrate`")
    if state == "25P02":
        return NotInTransaction(FAILED_TRANSACTION)
    if (state is None and connection_error) or (state or "").startswith(("08", "57P")):
        return DatabaseUnavailable(f"cannot reach PostgreSQL: {message}")
    return DatabaseError(f"{type(root).__name__}: {message}")


@contextmanager
def translating(
    errors: type[BaseException] | tuple[type[BaseException], ...],
    connection_errors: type[BaseException] | tuple[type[BaseException], ...] = (),
) -> Iterator[None]:
    """Raise a driver's ``errors`` raised in the block as :mod:`outbox.errors`."""
    try:
        yield
    except OutboxError:
        raise
    except errors as exc:
        raise translate(exc, connection_error=isinstance(exc, connection_errors)) from exc
