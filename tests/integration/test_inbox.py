"""outbox.inbox.receive on real PostgreSQL: new, duplicate, refused, concurrent, rolled back."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from outbox import (
    InvalidEndpoint,
    InvalidSignature,
    InvalidWebhook,
    MalformedWebhook,
    NotInTransaction,
    SchemaMissing,
)
from outbox.admin.migrations import migrate
from outbox.inbox import Received, receive, receive_async
from outbox.signing import generate_secret, webhook_headers
from tests.support.pg import SCHEMA

SECRET = generate_secret()


@pytest.fixture
def inbox_url(blank_db_url: str) -> str:
    """A receiver-only database: the inbox series, none of the sender's tables."""
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        migrate(c, SCHEMA, inbox=True)
    return blank_db_url


@pytest.fixture
def iconn(inbox_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(inbox_url) as c:
        c.execute("CREATE TABLE effects (webhook_id text)")
        c.commit()
        yield c


def signed(payload: bytes = b'{"invoice": 42}', *, msg_id: str | None = None,
           timestamp: int | None = None, secrets: list[str] | None = None
           ) -> tuple[bytes, dict[str, str]]:
    msg_id = msg_id or str(uuid.uuid4())
    return payload, webhook_headers(secrets or [SECRET], msg_id, payload, timestamp=timestamp)


def inbox_rows(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute(f"SELECT count(*) FROM {SCHEMA}.inbox").fetchone()
    assert row is not None
    return int(row[0])


def effects(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT count(*) FROM effects").fetchone()
    assert row is not None
    return int(row[0])


def process(conn: psycopg.Connection[Any], body: bytes, headers: dict[str, str]
            ) -> Received | None:
    """A receiver: the effect and the id commit together."""
    with conn.transaction():
        event = receive(conn, SECRET, body, headers, schema=SCHEMA)
        if event is not None:
            conn.execute("INSERT INTO effects VALUES (%s)", (event.webhook_id,))
    return event


def test_new_then_duplicate(inbox_url: str, iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed(msg_id="msg_1")
    event = process(iconn, body, headers)
    assert event is not None
    assert (event.webhook_id, event.payload, event.body) == ("msg_1", {"invoice": 42}, body)
    assert event.timestamp == int(headers["webhook-timestamp"])
    assert process(iconn, body, headers) is None
    again = signed(msg_id="msg_1")  # a retry: a new timestamp and signature, the same id
    assert process(iconn, *again) is None
    assert (inbox_rows(inbox_url), effects(inbox_url)) == (1, 1)


def test_async_new_then_duplicate(inbox_url: str, iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed()

    async def main() -> list[Received | None]:
        results: list[Received | None] = []
        async with await psycopg.AsyncConnection.connect(inbox_url) as aconn:
            for _ in range(2):
                async with aconn.transaction():
                    results.append(await receive_async(aconn, SECRET, body, headers,
                                                       schema=SCHEMA))
        return results

    first, second = asyncio.run(main())
    assert first is not None and first.payload == {"invoice": 42}
    assert second is None
    assert inbox_rows(inbox_url) == 1


def _headers_without(name: str) -> tuple[bytes, dict[str, str]]:
    body, headers = signed()
    del headers[name]
    return body, headers


def _tampered() -> tuple[bytes, dict[str, str]]:
    _, headers = signed(b'{"invoice": 42}')
    return b'{"invoice": 43}', headers


REFUSED: dict[str, tuple[Callable[[], tuple[bytes, dict[str, str]]], type[InvalidWebhook]]] = {
    "tampered body": (_tampered, InvalidSignature),
    "other secret": (lambda: signed(secrets=[generate_secret()]), InvalidSignature),
    "stale timestamp": (lambda: signed(timestamp=int(time.time()) - 301), InvalidSignature),
    "future timestamp": (lambda: signed(timestamp=int(time.time()) + 301), InvalidSignature),
    "no webhook-id": (lambda: _headers_without("webhook-id"), InvalidSignature),
    "no webhook-timestamp": (lambda: _headers_without("webhook-timestamp"), InvalidSignature),
    "no webhook-signature": (lambda: _headers_without("webhook-signature"), InvalidSignature),
    "not UTF-8": (lambda: signed(b'{"a": "\xff"}'), InvalidSignature),
    "not JSON": (lambda: signed(b"invoice=42"), MalformedWebhook),
    "empty body": (lambda: signed(b""), MalformedWebhook),
    "NaN": (lambda: signed(b'{"amount": NaN}'), MalformedWebhook),
    "id too long": (lambda: signed(msg_id="x" * 257), MalformedWebhook),
    "nested too deeply": (lambda: signed(b"[" * 100_000 + b"]" * 100_000), MalformedWebhook),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_writes_nothing(case: str, inbox_url: str,
                                iconn: psycopg.Connection[Any]) -> None:
    make, error = REFUSED[case]
    body, headers = make()
    with iconn.transaction():
        iconn.execute("INSERT INTO effects VALUES ('before')")
        with pytest.raises(error):
            receive(iconn, SECRET, body, headers, schema=SCHEMA)
        # no SQL ran: the caller's transaction is intact and commits its own write
        assert iconn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert (inbox_rows(inbox_url), effects(inbox_url)) == (0, 1)


def test_any_of_several_secrets(inbox_url: str, iconn: psycopg.Connection[Any]) -> None:
    """Rotation on either side: the receiver holds [new, old], or the sender signs with
    both; the same rules as outbox.verify."""
    old, new = generate_secret(), generate_secret()
    body, by_old = signed(secrets=[old])
    with iconn.transaction():
        assert receive(iconn, [new, old], body, by_old, schema=SCHEMA) is not None
    body, by_both = signed(secrets=[new, old])
    with iconn.transaction():
        assert receive(iconn, [old], body, by_both, schema=SCHEMA) is not None
    body, by_neither = signed(secrets=[generate_secret()])
    with iconn.transaction(), pytest.raises(InvalidSignature, match="no matching"):
        receive(iconn, [new, old], body, by_neither, schema=SCHEMA)
    assert inbox_rows(inbox_url) == 2


def test_tolerance_is_the_callers(iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed(timestamp=int(time.time()) - 600)
    with iconn.transaction():
        assert receive(iconn, SECRET, body, headers, schema=SCHEMA,
                       tolerance_seconds=900) is not None


def test_malformed_secret_is_a_configuration_error(iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed()
    with iconn.transaction():
        with pytest.raises(InvalidEndpoint):
            receive(iconn, "whsec_not base64!", body, headers, schema=SCHEMA)
        with pytest.raises(InvalidEndpoint, match="at least one"):
            receive(iconn, [], body, headers, schema=SCHEMA)


def test_autocommit_outside_a_transaction_is_refused(inbox_url: str) -> None:
    body, headers = signed()
    with psycopg.connect(inbox_url, autocommit=True) as c:
        with pytest.raises(NotInTransaction, match="autocommit"):
            receive(c, SECRET, body, headers, schema=SCHEMA)
        with c.transaction():  # the same connection inside a transaction is fine
            assert receive(c, SECRET, body, headers, schema=SCHEMA) is not None
    assert inbox_rows(inbox_url) == 1


def test_failed_transaction_is_refused(inbox_url: str, iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed()
    with pytest.raises(psycopg.errors.DivisionByZero):
        iconn.execute("SELECT 1/0")
    with pytest.raises(NotInTransaction, match="failed"):
        receive(iconn, SECRET, body, headers, schema=SCHEMA)
    iconn.rollback()
    assert inbox_rows(inbox_url) == 0


def test_rollback_forgets_the_id(inbox_url: str, iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed()
    with pytest.raises(RuntimeError), iconn.transaction():
        assert receive(iconn, SECRET, body, headers, schema=SCHEMA) is not None
        iconn.execute("INSERT INTO effects VALUES ('x')")
        raise RuntimeError("the business write failed")
    assert (inbox_rows(inbox_url), effects(inbox_url)) == (0, 0)
    assert process(iconn, body, headers) is not None  # the retry is processed
    assert (inbox_rows(inbox_url), effects(inbox_url)) == (1, 1)


def test_source_namespaces_ids(inbox_url: str, iconn: psycopg.Connection[Any]) -> None:
    body, headers = signed(msg_id="msg_same")
    with iconn.transaction():
        assert receive(iconn, SECRET, body, headers, schema=SCHEMA, source="a") is not None
        assert receive(iconn, SECRET, body, headers, schema=SCHEMA, source="b") is not None
        assert receive(iconn, SECRET, body, headers, schema=SCHEMA, source="a") is None
    with iconn.transaction(), pytest.raises(ValueError, match="source"):
        receive(iconn, SECRET, body, headers, schema=SCHEMA, source="s" * 129)


def test_missing_inbox_table_says_how_to_create_it(db_url: str) -> None:
    """The sender's tables alone (the test template) do not include the inbox."""
    body, headers = signed()
    with psycopg.connect(db_url) as c, pytest.raises(SchemaMissing, match="migrate --inbox"):
        receive(c, SECRET, body, headers, schema=SCHEMA)


def _wait_until_blocked(url: str, pid: int) -> None:
    """Poll until backend ``pid`` waits on a lock (a condition, not a timed assertion)."""
    with psycopg.connect(url, autocommit=True) as watch:
        while True:
            row = watch.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                (pid,)).fetchone()
            if row is not None and row[0] == "Lock":
                return
            time.sleep(0.01)


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_concurrent_duplicates_exactly_one_proceeds(first_ends: str, inbox_url: str) -> None:
    """Two transactions receive one id at once: the second waits for the first, then gets
    None if it committed, or the event (and proceeds) if it rolled back."""
    body, headers = signed()
    results: list[Received | None] = []
    with psycopg.connect(inbox_url) as first, psycopg.connect(inbox_url) as second:
        assert receive(first, SECRET, body, headers, schema=SCHEMA) is not None

        def racer() -> None:
            with second.transaction():
                results.append(receive(second, SECRET, body, headers, schema=SCHEMA))

        thread = threading.Thread(target=racer)
        thread.start()
        _wait_until_blocked(inbox_url, second.info.backend_pid)
        assert results == []  # still waiting for the first transaction
        if first_ends == "commit":
            first.commit()
        else:
            first.rollback()
        thread.join(30)
        assert not thread.is_alive()
    proceeded = [r for r in results if r is not None]
    assert len(results) == 1
    assert len(proceeded) == (1 if first_ends == "rollback" else 0)
    assert inbox_rows(inbox_url) == 1
