"""How a connection is told to be a session of its own or pooled (outbox.delivery.session),
from what the server reports and what the client's socket is."""

from __future__ import annotations

from outbox.delivery.session import _decide

DIRECT_TCP = ("127.0.0.1", 50123, 5432, "5432")


def test_direct_tcp_connection_is_a_session() -> None:
    assert _decide(DIRECT_TCP, 50123, 5432)


def test_pooler_on_another_port_is_not() -> None:
    # PgBouncer on 6432 connects to PostgreSQL on 5432 from a socket of its own
    assert not _decide(("127.0.0.1", 40001, 5432, "5432"), 50123, 6432)


def test_proxy_on_the_same_port_is_not() -> None:
    # a proxy on another host but the same port: the server sees the proxy's client port
    assert not _decide(("10.0.0.7", 40001, 5432, "5432"), 50123, 5432)


def test_pooler_reaching_the_server_over_a_unix_socket_is_not() -> None:
    assert not _decide((None, None, None, "5432"), 50123, 6432)


def test_direct_unix_socket_is_a_session() -> None:
    assert _decide((None, None, None, "5432"), None, "5432")


def test_unix_socket_to_a_pooler_is_not() -> None:
    assert not _decide((None, None, None, "5432"), None, "6432")  # PgBouncer's socket
    assert not _decide(("127.0.0.1", 40001, 5432, "5432"), None, "6432")


def test_no_answer_is_not() -> None:
    assert not _decide(None, 50123, 5432)
