"""Payloads as applications hold them: each accepted type's exact JSON bytes, each refusal.

The bytes are what every delivery signs and sends, so each form is asserted exactly.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import uuid_utils
from pydantic import BaseModel, ConfigDict

from outbox import Event, InvalidEvent
from outbox._emit.event import prepare
from outbox.errors import ConfigurationError
from outbox.settings import Settings, load_callable

LIMIT = 1 << 20
UID = uuid.UUID("0190f3a4-1b2c-7d3e-8f40-123456789abc")


def body(payload: Any, **kwargs: Any) -> str:
    return prepare(Event("x", payload), LIMIT, **kwargs).payload


class Colour(enum.Enum):
    RED = "red"
    PRICE = Decimal("1.50")


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Line:
    sku: str
    amount: Decimal


@dataclasses.dataclass(frozen=True, slots=True)
class Invoice:
    id: uuid.UUID
    lines: list[Line]
    paid_at: dt.datetime | None = None


class Customer(BaseModel):
    id: uuid.UUID
    since: dt.datetime
    balance: Decimal


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents


class Wallet(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    money: Money


def money_default(o: object) -> object:
    """An application's hook: encodes Money, refuses the rest the json.dumps way."""
    if isinstance(o, Money):
        return {"cents": o.cents}
    raise TypeError(f"no encoding for {type(o).__name__}")


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # datetime: isoformat, offset kept; UTC is +00:00; microseconds only when non-zero
        (dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC), '"2024-05-01T12:00:00+00:00"'),
        (dt.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
         '"2024-05-01T12:00:00.250000+02:00"'),
        (dt.datetime(2024, 1, 15, 9, 30, tzinfo=ZoneInfo("America/New_York")),
         '"2024-01-15T09:30:00-05:00"'),
        (dt.datetime(2024, 5, 1, 12, 0), '"2024-05-01T12:00:00"'),  # naive stays naive
        (dt.date(2024, 5, 1), '"2024-05-01"'),
        (dt.time(12, 30, 5), '"12:30:05"'),
        (dt.time(12, 30, tzinfo=dt.UTC), '"12:30:00+00:00"'),
        # Decimal: a string of its exact digits and exponent, never a float
        (Decimal("9.99"), '"9.99"'),
        (Decimal("9.990"), '"9.990"'),
        (Decimal("0.1") + Decimal("0.2"), '"0.3"'),
        (Decimal("12345678901234567890.123456789"), '"12345678901234567890.123456789"'),
        (Decimal("1E+2"), '"1E+2"'),
        (Decimal("-0"), '"-0"'),
        # UUID: canonical lowercase string
        (UID, '"0190f3a4-1b2c-7d3e-8f40-123456789abc"'),
        (uuid.UUID("0190F3A4-1B2C-7D3E-8F40-123456789ABC"),
         '"0190f3a4-1b2c-7d3e-8f40-123456789abc"'),
        (uuid_utils.UUID("0190f3a4-1b2c-7d3e-8f40-123456789abc"),
         '"0190f3a4-1b2c-7d3e-8f40-123456789abc"'),
        # Enum: its value, itself encoded by the same rules
        (Colour.RED, '"red"'),
        (Colour.PRICE, '"1.50"'),
        (Level.HIGH, "3"),
        # containers: tuples are arrays; the types above nested anywhere
        ((1, "a"), '[1,"a"]'),
        ({"amount": Decimal("9.99"), "at": [dt.date(2024, 5, 1)], "id": UID},
         '{"amount":"9.99","at":["2024-05-01"],"id":"0190f3a4-1b2c-7d3e-8f40-123456789abc"}'),
        ({"é": "ü€"}, '{"é":"ü€"}'),  # non-ASCII kept as UTF-8
        # dataclasses, nested, fields in declaration order
        (Line("A-1", Decimal("2.50")), '{"sku":"A-1","amount":"2.50"}'),
        (Invoice(UID, [Line("A-1", Decimal("2.50"))], dt.datetime(2024, 5, 1, tzinfo=dt.UTC)),
         '{"id":"0190f3a4-1b2c-7d3e-8f40-123456789abc","lines":[{"sku":"A-1",'
         '"amount":"2.50"}],"paid_at":"2024-05-01T00:00:00+00:00"}'),
        # pydantic: model_dump(mode="json"), pydantic's forms (UTC as Z)
        (Customer(id=UID, since=dt.datetime(2024, 5, 1, tzinfo=dt.UTC),
                  balance=Decimal("10.00")),
         '{"id":"0190f3a4-1b2c-7d3e-8f40-123456789abc","since":"2024-05-01T00:00:00Z",'
         '"balance":"10.00"}'),
        ({"customers": [Customer(id=UID, since=dt.datetime(2024, 5, 1),
                                 balance=Decimal("1"))]},
         '{"customers":[{"id":"0190f3a4-1b2c-7d3e-8f40-123456789abc",'
         '"since":"2024-05-01T00:00:00","balance":"1"}]}'),
    ],
)
def test_json_form(payload: Any, expected: str) -> None:
    assert body(payload) == expected
    assert body({"v": payload}) == '{"v":' + expected + "}"


def test_decimal_never_goes_through_float() -> None:
    exact = Decimal("0.1000000000000000055511151231257827")  # float(0.1) has more digits
    assert json.loads(body(exact)) == str(exact)
    assert body(Decimal("0.1")) == '"0.1"'


def test_plain_json_unchanged() -> None:
    assert body({"a": [1, 2.5, None, True], "b": {"c": "d"}}) == \
        '{"a":[1,2.5,null,true],"b":{"c":"d"}}'


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"n": math.nan}, "not JSON-serialisable"),
        ({"n": -math.inf}, "not JSON-serialisable"),
        ({"d": Decimal("NaN")}, r"Decimal NaN is not a finite number"),
        ({"d": Decimal("sNaN")}, r"Decimal sNaN is not a finite number"),
        ({"d": Decimal("Infinity")}, r"Decimal Infinity is not a finite number"),
        ({"d": Decimal("-Infinity")}, r"Decimal -Infinity is not a finite number"),
        ({"s": {1, 2}}, r"set is not JSON serializable \(a set has no order"),
        (frozenset({"a"}), r"frozenset is not JSON serializable \(a set has no order"),
        ({"b": b"\x00"}, r"bytes is not JSON serializable \(encode bytes first"),
        ({"o": object()}, r"object is not JSON serializable \(pass json_default="),
        ({"m": Money(5)}, r"Money is not JSON serializable"),
        ({"t": Line}, r"type is not JSON serializable"),  # a dataclass type, not an instance
        ({(1, 2): "tuple key"}, "keys must be"),
        ({UID: "uuid key"}, "keys must be"),
        ({"s": "a\ud800b"}, r"lone surrogate '\\ud800'"),
        ({"k\udfff": 1}, r"lone surrogate '\\udfff'"),
        (Line("\udc80", Decimal(1)), "lone surrogate"),
        (Wallet(money=Money(1)), "Unable to serialize unknown type"),  # pydantic's own error
    ],
)
def test_refused(payload: Any, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        prepare(Event("x", payload), LIMIT)


def test_circular_and_deep_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidEvent, match="Circular reference"):
        prepare(Event("x", loop), LIMIT)
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidEvent, match="not JSON-serialisable"):
        prepare(Event("x", deep), LIMIT)


@pytest.mark.parametrize("field", ["key", "idempotency_key", "tenant"])
def test_lone_surrogate_in_key_or_tenant_refused(field: str) -> None:
    with pytest.raises(InvalidEvent, match=f"{field} holds a lone surrogate"):
        prepare(Event("x", {}, **{field: "a\ud800"}), LIMIT)
    assert prepare(Event("x", {}, **{field: "ü€"}), LIMIT)  # non-ASCII itself is fine


def test_size_limit_counts_encoded_forms() -> None:
    with pytest.raises(InvalidEvent, match="8 bytes, over the 7-byte limit"):
        prepare(Event("x", Decimal("9.9999")), 7)
    assert prepare(Event("x", Decimal("9.999")), 7).payload == '"9.999"'


# --- json_default: the application's own types ------------------------------------------

def test_hook_encodes_app_types_nested() -> None:
    payload = {"total": Money(999), "lines": [Line("A", Decimal("1.0"))], "m": (Money(1),)}
    assert body(payload, json_default=money_default) == \
        '{"total":{"cents":999},"lines":[{"sku":"A","amount":"1.0"}],"m":[{"cents":1}]}'


def test_hook_result_is_encoded_by_the_same_rules() -> None:
    def to_decimal(o: object) -> object:
        if isinstance(o, Money):
            return {"amount": Decimal(o.cents) / 100, "at": dt.date(2024, 5, 1)}
        raise TypeError
    assert body(Money(999), json_default=to_decimal) == '{"amount":"9.99","at":"2024-05-01"}'


def test_hook_never_sees_builtin_types() -> None:
    seen: list[object] = []

    def spy(o: object) -> object:
        seen.append(o)
        return "hooked"
    out = body({"d": Decimal("1"), "t": dt.date(2024, 5, 1), "u": UID, "e": Colour.RED,
                "n": 1, "m": Money(1)}, json_default=spy)
    assert out == ('{"d":"1","t":"2024-05-01","u":"0190f3a4-1b2c-7d3e-8f40-123456789abc",'
                   '"e":"red","n":1,"m":"hooked"}')
    assert [type(o) for o in seen] == [Money]


def test_hook_refusal_is_invalid_event() -> None:
    with pytest.raises(InvalidEvent, match=r"set is not JSON serializable \(a set"):
        prepare(Event("x", {"s": {1}}), LIMIT, json_default=money_default)
    with pytest.raises(InvalidEvent, match=r"object is not JSON serializable "
                                           r"\(json_default did not encode it\)"):
        prepare(Event("x", object()), LIMIT, json_default=money_default)


def test_hook_raising_anything_else_is_invalid_event() -> None:
    def broken(o: object) -> object:
        raise KeyError("boom")
    with pytest.raises(InvalidEvent, match=r"json_default .*broken raised KeyError\('boom'\)"):
        prepare(Event("x", {"m": Money(1)}), LIMIT, json_default=broken)


@dataclasses.dataclass
class Unset:
    a: int
    later: int = dataclasses.field(init=False)


class Exploding:
    """A descriptor whose read fails with something other than TypeError/ValueError."""

    def __get__(self, obj: object, owner: type | None = None) -> int:
        if obj is None:
            return 0
        raise RuntimeError("cannot read")

    def __set__(self, obj: object, value: int) -> None:
        pass


@dataclasses.dataclass
class Fragile:
    x: int = Exploding()  # type: ignore[assignment]


@pytest.mark.parametrize("hook", [None, money_default])
def test_an_object_outbox_encodes_that_fails_is_invalid_event(hook: Any) -> None:
    """Reading an application's dataclass may raise anything: InvalidEvent, not that."""
    with pytest.raises(InvalidEvent, match=r"encoding Unset raised AttributeError\(.*later"):
        prepare(Event("x", {"u": Unset(1)}), LIMIT, json_default=hook)
    with pytest.raises(InvalidEvent, match=r"encoding Fragile raised RuntimeError"):
        prepare(Event("x", [Fragile()]), LIMIT, json_default=hook)


def test_hook_returning_nan_is_refused() -> None:
    with pytest.raises(InvalidEvent, match="not JSON-serialisable"):
        prepare(Event("x", Money(1)), LIMIT, json_default=lambda o: math.nan)


def test_hook_returning_itself_is_refused() -> None:
    with pytest.raises(InvalidEvent, match="Circular reference"):
        prepare(Event("x", Money(1)), LIMIT, json_default=lambda o: o)


def test_unhashable_callable_hook() -> None:
    class Hook:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, o: object) -> object:
            return money_default(o)
    assert body(Money(2), json_default=Hook()) == '{"cents":2}'


# --- OUTBOX_JSON_DEFAULT ---------------------------------------------------------------

def test_setting_loads_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_JSON_DEFAULT", f"{__name__}:money_default")
    hook = Settings().json_default_hook
    assert hook is money_default
    assert Settings(json_default=f"{__name__}.money_default").json_default_hook is hook
    assert body(Money(3), json_default=hook) == '{"cents":3}'
    assert Settings(json_default="").json_default_hook is None


def test_setting_malformed_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match="OUTBOX_JSON_DEFAULT must be an import path"):
        Settings(json_default="not a path")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("no_such_module_xyz:f", "cannot be imported: ModuleNotFoundError"),
        (f"{__name__}:no_such_function", "cannot be imported: AttributeError"),
        (f"{__name__}:LIMIT", "is not callable"),
        ("json", "not an import path"),
        ("broken_hook_module:f", r"cannot be imported: RuntimeError\('import fails'\)"),
    ],
)
def test_setting_unloadable_is_configuration_error(
        path: str, reason: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_hook_module.py").write_text("raise RuntimeError('import fails')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError, match=reason):
        load_callable(path)
