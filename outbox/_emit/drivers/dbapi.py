"""The edge for DB-API cursors that take psycopg's placeholders: psycopg2, and Django's
``connection.cursor()`` (on its psycopg 3 or psycopg2 backend).

Every statement runs on a cursor the edge opens on the caller's connection, inside the
caller's transaction; outbox never begins, commits or rolls back. Rows are read by
position or, for dict rows, by their first value, so the caller's cursor class does not
matter.

Prepared statements: these cursors send each statement as text, which PostgreSQL parses
and plans every time (emit's statement takes about 0.5 ms of that; prepared, a lookup of
about 0.1 ms replaces it). As psycopg 3 does by itself, a statement with scalar parameters
(the single-event emits) that ran ``prepare_threshold`` times on a connection
(``OUTBOX_PREPARE_THRESHOLD``; None: never) runs prepared from then on: in the caller's
transaction, outbox looks the statement up in ``pg_prepared_statements``, prepares it if
this server session lacks it (``PREPARE outbox_<hash>``; a prepared statement outlives a
rollback), then runs it with ``EXECUTE``. Looked up every time, not remembered: a pooler that
hands each transaction another server connection (PgBouncer in transaction mode), or a
``DISCARD ALL``, costs a PREPARE, never an error. Only for cursors that format parameters
into the statement's text (psycopg2's, psycopg 3's ``ClientCursor``, which Django uses by
default): a psycopg 3 cursor that binds server-side (Django's ``server_side_binding``)
prepares by itself, and PostgreSQL refuses ``EXECUTE name ($1, ...)`` from it.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any

from outbox._db import queries
from outbox._emit.drivers.base import Params, Style, as_tuples, to_dollar

# connection -> statement name -> executions so far (the threshold's count)
_RUNS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
# connection -> its lock: threads sharing a connection look up and PREPARE one at a time
_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()  # guards the two dicts (no I/O under it)

Fetch = Callable[[str, Params | None], list[tuple[Any, ...]]]


@lru_cache(maxsize=64)
def _prepared(query: str) -> tuple[str, str, tuple[str, ...] | int]:
    """(name, PREPARE statement, parameter order) for a psycopg statement."""
    text, order = to_dollar(query)
    name = "outbox_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    return name, f"PREPARE {name} AS {text}", order


def _scalar(params: Params) -> bool:
    values = params.values() if isinstance(params, Mapping) else params
    return not any(isinstance(v, list | tuple) for v in values)


def prepared(conn: Any, query: str, params: Params, threshold: int | None, fetch: Fetch
             ) -> tuple[str, Params]:
    """``query`` as it runs on ``conn`` (a driver connection): as is, or ``EXECUTE`` of its
    prepared form (see above). ``fetch(sql, params)`` runs a statement on ``conn`` in the
    caller's transaction and returns its rows ([] for none). Statements with array
    parameters always run as is."""
    if threshold is None or not _scalar(params):
        return query, params
    name, prepare, order = _prepared(query)
    if not order:
        return query, params
    with _LOCK:
        runs = _RUNS.setdefault(conn, {})
        if runs.get(name, 0) < threshold:
            runs[name] = runs.get(name, 0) + 1
            return query, params
        lock = _LOCKS.setdefault(conn, threading.Lock())
    with lock:
        if not fetch(queries.PREPARED_STATEMENT, (name,)):
            fetch(prepare, None)
    if isinstance(order, int):
        args = list(params)
    else:
        assert isinstance(params, Mapping)
        args = [params[n] for n in order]
    return f"EXECUTE {name} ({', '.join(['%s'] * len(args))})", args


def formats_client_side(cur: Any) -> bool:
    """Whether the driver cursor ``cur`` merges parameters into the statement's text (so
    ``EXECUTE name (%s, ...)`` reaches PostgreSQL with literals, as SQL PREPARE needs)."""
    families = {c.__module__.partition(".")[0] for c in type(cur).__mro__}
    if "psycopg2" in families:
        return True
    if "psycopg" in families:
        import psycopg

        return isinstance(cur, psycopg.ClientCursor | psycopg.AsyncClientCursor)
    return False


def _fetch(cur: Any) -> Fetch:
    def fetch(sql: str, params: Params | None) -> list[tuple[Any, ...]]:
        cur.execute(sql, params)
        return as_tuples(cur.fetchall()) if cur.description else []

    return fetch


class CursorRunner:
    """A :class:`~outbox._emit.drivers.base.SyncRunner` over a DB-API cursor factory.

    ``cursor()`` opens a cursor (a context manager) on the caller's connection,
    ``check()`` raises NotInTransaction before any SQL, ``translated()`` turns the
    driver's errors into :mod:`outbox.errors`, ``raw()`` is the driver connection the
    cursors run on (the owner of its prepared statements), and ``driver_cursor(cur)`` the
    driver's cursor under one of ``cursor()``'s (an ORM's wrapper): statements are
    prepared only if it :func:`formats_client_side`.
    """

    style: Style = "pyformat"

    def __init__(
        self,
        cursor: Callable[[], AbstractContextManager[Any]],
        check: Callable[[], None],
        translated: Callable[[], AbstractContextManager[None]],
        raw: Callable[[], Any],
        driver_cursor: Callable[[Any], Any] = lambda cur: cur,
    ) -> None:
        self._cursor = cursor
        self._check = check
        self._translated = translated
        self._raw = raw
        self._driver_cursor = driver_cursor
        self.prepare_threshold: int | None = None

    def check(self) -> None:
        with self._translated():
            self._check()

    def _statement(self, cur: Any, query: str, params: Params) -> tuple[str, Params]:
        if not formats_client_side(self._driver_cursor(cur)):
            return query, params
        return prepared(self._raw(), query, params, self.prepare_threshold, _fetch(cur))

    def run(self, query: str, params: Params) -> None:
        with self._translated(), self._cursor() as cur:
            cur.execute(*self._statement(cur, query, params))

    def rows(self, query: str, params: Params) -> list[tuple[Any, ...]]:
        with self._translated(), self._cursor() as cur:
            cur.execute(*self._statement(cur, query, params))
            return as_tuples(cur.fetchall())
