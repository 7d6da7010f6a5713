"""Alembic's env.py as its ``generic`` and ``async`` templates write it, minus logging:
an async engine (asyncpg) runs the migrations through ``connection.run_sync``."""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import Connection, create_engine, pool
from sqlalchemy.ext.asyncio import create_async_engine

URL = os.environ["TEST_ALEMBIC_URL"]


def run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()


async def run_async() -> None:
    engine = create_async_engine(URL, poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(run_migrations)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=URL, target_metadata=None, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif "+asyncpg" in URL:
    asyncio.run(run_async())
else:
    with create_engine(URL, poolclass=pool.NullPool).connect() as conn:
        run_migrations(conn)
