"""Driver edges: emit on whatever PostgreSQL handle the application holds.

One small module per driver family, each imported only when the handle passed is of that
family (its type, or a base class, is defined in that package), so outbox never imports a
driver or ORM the application did not import itself:

- :mod:`outbox._emit.drivers.pg2`: psycopg2 connection or cursor;
- :mod:`outbox._emit.drivers.apg`: asyncpg ``Connection`` / pool connection;
- :mod:`outbox._emit.drivers.sa`: SQLAlchemy 2 ``Session`` / ``Connection`` / ``AsyncSession`` /
  ``AsyncConnection``;
- :mod:`outbox._emit.drivers.dbapi`: the cursor runner psycopg2 and ``outbox.contrib.django`` use.

- :mod:`outbox._emit.drivers.psycopg`: psycopg 3 ``Connection`` / ``AsyncConnection`` (binary
  COPY, its own row factories), chosen by :mod:`outbox._emit.api` before any of the above.

Anything else is a :class:`TypeError` naming what is supported.
"""

from __future__ import annotations

from typing import Any

from outbox._emit.drivers.base import AsyncRunner, SyncRunner

SUPPORTED = (
    "a psycopg 3 Connection, a psycopg2 connection or cursor, or a SQLAlchemy Session or "
    "Connection (emit/emit_many); a psycopg 3 AsyncConnection, an asyncpg Connection or "
    "pool connection, or a SQLAlchemy AsyncSession or AsyncConnection "
    "(emit_async/emit_many_async); in Django, outbox.contrib.django.emit(event, using=...)"
)


def _families(handle: Any) -> set[str]:
    """The top-level packages defining ``handle``'s type and its base classes."""
    return {c.__module__.partition(".")[0] for c in type(handle).__mro__}


def _refuse(handle: Any, wanted: str, hint: str) -> TypeError:
    name = f"{type(handle).__module__}.{type(handle).__qualname__}"
    if _families(handle) & {"django"}:
        hint = ": in Django, use outbox.contrib.django.emit(event, using=...)"
    return TypeError(f"cannot emit on {name}{hint}. outbox {wanted} takes {SUPPORTED}")


def _is_async(handle: Any) -> bool:
    families = _families(handle)
    modules = {c.__module__ for c in type(handle).__mro__}
    return ("asyncpg" in families or any(m.startswith("sqlalchemy.ext.asyncio") for m in modules)
            or any(c.__name__ == "AsyncConnection" for c in type(handle).__mro__
                   if c.__module__.startswith("psycopg.")))


def sync_runner(handle: Any) -> SyncRunner:
    """The runner for a synchronous handle, or TypeError naming what is supported."""
    families = _families(handle)
    found: SyncRunner | None = None
    if "psycopg2" in families:
        from outbox._emit.drivers import pg2

        found = pg2.runner(handle)
    elif "sqlalchemy" in families and not _is_async(handle):
        from outbox._emit.drivers import sa

        found = sa.runner(handle)
    if found is None:
        hint = ": it is asynchronous, use outbox.emit_async / emit_many_async"
        raise _refuse(handle, "emit", hint if _is_async(handle) else "")
    return found


def async_runner(handle: Any) -> AsyncRunner:
    """The runner for an asynchronous handle, or TypeError naming what is supported."""
    families = _families(handle)
    found: AsyncRunner | None = None
    if "asyncpg" in families:
        from outbox._emit.drivers import apg

        found = apg.runner(handle)
    elif "sqlalchemy" in families and _is_async(handle):
        from outbox._emit.drivers import sa

        found = sa.async_runner(handle)
    if found is None:
        sync = not _is_async(handle) and families & {"psycopg", "psycopg2", "sqlalchemy"}
        hint = ": it is synchronous, use outbox.emit / emit_many"
        raise _refuse(handle, "emit_async", hint if sync else "")
    return found
