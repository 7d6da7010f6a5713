"""The asyncpg edge: an ``asyncpg.Connection`` or a pool-acquired one (``PoolConnectionProxy``).

asyncpg runs every statement in autocommit unless it is inside ``conn.transaction()``:
outside one, emit raises NotInTransaction before any SQL. Statements are psycopg's,
translated once to ``$n`` placeholders; ids are bound as text and json as text cast in SQL,
so the caller's type codecs (``set_type_codec``) neither matter nor are touched. Rows are
asyncpg records read by position, whatever ``record_class`` the connection uses.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from typing import Any

from outbox._emit.drivers.base import Params, Style, as_tuples, translating
from outbox.errors import NotInTransaction


def _asyncpg() -> Any:
    """asyncpg, already imported by the application that passed its connection (Any:
    asyncpg ships no type information)."""
    importlib.import_module("asyncpg.pool")
    return importlib.import_module("asyncpg")


class AsyncpgRunner:
    """An :class:`~outbox._emit.drivers.base.AsyncRunner` over an asyncpg connection."""

    style: Style = "dollar"
    prepare_threshold: int | None = None  # asyncpg's statement cache prepares

    def __init__(self, conn: Any) -> None:
        self._conn = conn  # asyncpg.Connection or asyncpg.pool.PoolConnectionProxy

    async def check(self) -> None:
        with translated():  # a pool connection already released raises InterfaceError
            in_transaction = self._conn.is_in_transaction()
        if not in_transaction:
            raise NotInTransaction(
                "asyncpg connection is outside a transaction (asyncpg autocommits every "
                "statement): emit inside `async with conn.transaction():` so the event "
                "commits with your own writes"
            )

    async def run(self, query: str, params: Params) -> None:
        with translated():
            await self._conn.execute(query, *params)

    async def rows(self, query: str, params: Params) -> list[tuple[Any, ...]]:
        with translated():
            return as_tuples(await self._conn.fetch(query, *params))


def runner(handle: Any) -> AsyncpgRunner | None:
    """A runner for an asyncpg connection or pool proxy, or None if ``handle`` is neither."""
    asyncpg = _asyncpg()
    if isinstance(handle, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        return AsyncpgRunner(handle)
    return None


def translated() -> AbstractContextManager[None]:
    asyncpg = _asyncpg()
    return translating((asyncpg.PostgresError, asyncpg.InterfaceError, OSError), OSError)
