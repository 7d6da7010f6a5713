"""Payload types through emit on a real PostgreSQL: the stored bytes are the documented ones
(outbox.Event), and a payload or hook that fails writes nothing."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import psycopg
import pytest

import outbox
from outbox import ConfigurationError, Event, InvalidEvent, Settings
from tests.support.pg import count

UID = uuid.UUID("0190f3a4-1b2c-7d3e-8f40-123456789abc")
PAYLOAD = {
    "amount": Decimal("9.990"),
    "paid_at": dt.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    "due": dt.date(2024, 6, 1),
    "customer": UID,
}
EXPECTED = ('{"amount":"9.990","paid_at":"2024-05-01T12:00:00.250000+02:00","due":"2024-06-01",'
            '"customer":"0190f3a4-1b2c-7d3e-8f40-123456789abc"}')


class Status(enum.Enum):
    PAID = "paid"


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents


def money_default(o: object) -> object:
    if isinstance(o, Money):
        return {"cents": o.cents}
    raise TypeError(type(o).__name__)


def broken_default(o: object) -> object:
    raise RuntimeError("hook bug")


def _stored(url: str) -> list[str]:
    with psycopg.connect(url) as c:
        rows = c.execute("SELECT payload::text FROM outbox.events ORDER BY id").fetchall()
    return [r[0] for r in rows]


def test_decimal_and_datetime_stored_as_documented(
        db_url: str, conn: psycopg.Connection[Any], settings: Settings) -> None:
    outbox.emit(conn, Event("invoice.paid", PAYLOAD), settings=settings)
    outbox.emit_many(conn, [Event("invoice.paid", {"status": Status.PAID, **PAYLOAD})],
                     settings=settings)
    conn.commit()
    assert _stored(db_url) == [EXPECTED, '{"status":"paid",' + EXPECTED[1:]]


def test_setting_hook_encodes_app_types(
        db_url: str, conn: psycopg.Connection[Any], settings: Settings) -> None:
    s = settings.model_copy(update={"json_default": f"{__name__}:money_default"})
    outbox.emit(conn, Event("invoice.paid", {"total": Money(999)}), settings=s)
    outbox.emit_many(conn, [Event("invoice.paid", [Money(1)])], settings=s)
    conn.commit()
    assert _stored(db_url) == ['{"total":{"cents":999}}', '[{"cents":1}]']


@pytest.mark.parametrize(
    ("hook", "error", "reason"),
    [
        (f"{__name__}:broken_default", InvalidEvent, r"raised RuntimeError\('hook bug'\)"),
        (f"{__name__}:no_such_hook", ConfigurationError, "cannot be imported"),
    ],
)
def test_failing_hook_writes_nothing(db_url: str, conn: psycopg.Connection[Any],
                                     settings: Settings, hook: str,
                                     error: type[Exception], reason: str) -> None:
    s = settings.model_copy(update={"json_default": hook})
    conn.execute("CREATE TABLE invoices (id int)")
    conn.execute("INSERT INTO invoices VALUES (1)")
    with pytest.raises(error, match=reason):
        outbox.emit(conn, Event("invoice.paid", {"total": Money(1)}), settings=s)
    with pytest.raises(error, match=reason):
        outbox.emit_many(conn, [Event("ok", {}), Event("x", Money(1))], settings=s)
    conn.commit()  # the transaction was not aborted: the business write commits alone
    assert count(db_url, "events") == 0
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM invoices").fetchone() == (1,)


@pytest.mark.parametrize("payload", [{"d": Decimal("NaN")}, {"s": "\ud800"}, {1, 2}])
def test_refused_payload_writes_nothing(db_url: str, conn: psycopg.Connection[Any],
                                        settings: Settings, payload: Any) -> None:
    with pytest.raises(InvalidEvent):
        outbox.emit(conn, Event("x", payload), settings=settings)
    conn.commit()
    assert count(db_url, "events") == 0
