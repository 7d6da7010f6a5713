"""Is this connection a PostgreSQL session of our own, or does something pool it?

Session state -- ``LISTEN``, a session advisory lock, a session ``SET`` -- holds only
while every statement of the connection runs in the same server process. Behind a
transaction-mode pooler (PgBouncer ``pool_mode = transaction``) it does not: each
transaction may run on another server connection, and whatever one leaves behind is
inherited by the next client of that server connection.

How it is told (:func:`direct`): the server reports the client address and port it
sees (``inet_client_addr()``, ``inet_client_port()``) and the port it listens on; a
direct TCP connection is one where the server sees our own socket's local port and
listens on the port we connected to; a direct Unix-socket connection is one where the
server sees no client address and listens on the port we connected to. A pooler (or any
proxy: HAProxy, a userland port forward) connects from its own socket, so at least one
differs. That is conservative: behind a proxy that keeps sessions (PgBouncer in session
mode, a TCP forwarder) the check also says "not direct", and the callers use what works
without a session (the wake-up polls, the pruner runs without its lock).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import psycopg

from outbox.delivery import queries


def _local_port(fd: int) -> int | None:
    """Our socket's local TCP port, or None for a Unix socket."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        return int(sock.getsockname()[1])
    finally:
        sock.close()


def _decide(row: tuple[Any, ...] | None, local_port: int | None, port: object) -> bool:
    if row is None:
        return False
    client_addr, client_port, server_port, listen_port = row
    if local_port is None:  # Unix socket
        return client_addr is None and str(listen_port) == str(port)
    return client_port == local_port and str(server_port) == str(port)


async def direct(conn: psycopg.AsyncConnection[Any]) -> bool:
    """True if ``conn`` reaches its own PostgreSQL server process (see the module)."""
    row = await (await conn.execute(queries.SESSION_PROBE)).fetchone()
    return _decide(row, _local_port(conn.pgconn.socket), conn.info.port)


def direct_sync(conn: psycopg.Connection[Any]) -> bool:
    """:func:`direct` for a synchronous connection."""
    row = conn.execute(queries.SESSION_PROBE).fetchone()
    return _decide(row, _local_port(conn.pgconn.socket), conn.info.port)
