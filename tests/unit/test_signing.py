"""outbox.signing cross-checked against the reference ``standardwebhooks`` package.

The agreement table runs every case through both verifiers with the reference's clock
frozen at ``NOW`` and asserts each one gives the *expected* answer, so a case fails if
either side drifts, not only if they disagree with each other.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from types import MappingProxyType
from typing import Self

import httpx
import pytest
from standardwebhooks import Webhook
from standardwebhooks import webhooks as reference_module

from outbox.errors import InvalidEndpoint, InvalidSignature
from outbox.signing import (
    SECRET_PREFIX,
    decode_secret,
    generate_secret,
    sign,
    signature_header,
    verify,
    webhook_headers,
)

NOW = 1_700_000_000
SECRET = SECRET_PREFIX + base64.b64encode(bytes(range(32))).decode()
OTHER_SECRET = SECRET_PREFIX + base64.b64encode(bytes(range(100, 132))).decode()
THIRD_SECRET = SECRET_PREFIX + base64.b64encode(b"\x07" * 40).decode()
MSG_ID = "msg_2Zk9qRr3nX8bQ1"
BODY = '{"type":"order.created","data":{"id":42,"note":"café ☕"}}'.encode()
HEADER_NAMES = ("webhook-id", "webhook-timestamp", "webhook-signature")


def _utc(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _reference_sig(secret: str, msg_id: str, ts: int, body: bytes) -> str:
    """Base64 part of the reference signature (without ``v1,``)."""
    return Webhook(secret).sign(msg_id, _utc(ts), body.decode()).split(",", 1)[1]


def reference_accepts(secret: str, body: bytes | str, headers: dict[str, str]) -> bool:
    """The reference "rejects" by raising anything (it sometimes raises bare ValueError)."""
    try:
        Webhook(secret).verify(body, dict(headers), json_parse=False)
    except Exception:
        return False
    return True


def ours_accepts(secret: str, body: bytes | str, headers: dict[str, str]) -> bool:
    try:
        verify(secret, body, headers, now=NOW)
    except InvalidSignature as exc:
        assert secret.removeprefix(SECRET_PREFIX) not in str(exc)
        return False
    return True


class _FrozenDatetime(datetime):
    @classmethod
    def now(cls, tz: tzinfo | None = None) -> Self:
        return cls.fromtimestamp(NOW, tz=tz)


@pytest.fixture
def frozen_reference(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(reference_module, "datetime", _FrozenDatetime)
    yield


@dataclass(frozen=True)
class Case:
    """One received webhook. ``{good}``/``{other}`` in ``signature`` are replaced by the
    base64 signature of (MSG_ID, signed_at, BODY) under SECRET / OTHER_SECRET."""

    expected: bool
    signature: str | None = "v1,{good}"
    timestamp: str | None = str(NOW)
    msg_id: str | None = MSG_ID
    body: bytes | str = BODY
    secret: str = SECRET
    signed_at: int = NOW
    names: tuple[str, str, str] = HEADER_NAMES

    def headers(self) -> dict[str, str]:
        good = _reference_sig(SECRET, MSG_ID, self.signed_at, BODY)
        other = _reference_sig(OTHER_SECRET, MSG_ID, self.signed_at, BODY)
        values = (
            self.msg_id,
            self.timestamp,
            None if self.signature is None else self.signature.format(good=good, other=other),
        )
        return {
            name: value for name, value in zip(self.names, values, strict=True) if value is not None
        }


ZERO_SIG = base64.b64encode(bytes(32)).decode()

AGREEMENT_CASES = [
    # accepted
    pytest.param(Case(True), id="valid"),
    pytest.param(Case(True, body=BODY.decode()), id="valid-str-body"),
    pytest.param(Case(True, secret=SECRET.removeprefix(SECRET_PREFIX)), id="secret-no-prefix"),
    pytest.param(
        Case(True, names=("Webhook-Id", "WEBHOOK-TIMESTAMP", "Webhook-Signature")),
        id="mixed-case-header-names",
    ),
    pytest.param(Case(True, timestamp=str(NOW - 300), signed_at=NOW - 300), id="oldest-allowed"),
    pytest.param(Case(True, timestamp=str(NOW + 300), signed_at=NOW + 300), id="newest-allowed"),
    pytest.param(Case(True, signature="v2,{good} v1,{good}"), id="non-v1-entry-skipped"),
    pytest.param(Case(True, signature="v1,{other} v1,{good}"), id="second-entry-matches"),
    pytest.param(Case(True, signature="v1,{good} v1,{other}"), id="first-entry-matches"),
    pytest.param(Case(True, signature="v1,{good} junk"), id="junk-after-match-ignored"),
    pytest.param(Case(True, signature="v1,{good}!"), id="non-base64-char-ignored"),
    pytest.param(Case(True, signature="v1,{good}tail"), id="data-after-padding-ignored"),
    pytest.param(Case(True, timestamp=f"{NOW}.75"), id="fractional-timestamp-floored"),
    pytest.param(Case(True, timestamp=f" {NOW} "), id="padded-timestamp"),
    pytest.param(Case(True, timestamp="1.7e9"), id="exponent-timestamp"),
    # float -> datetime rounds to the microsecond *before* flooring: this is 1700000000
    pytest.param(Case(True, timestamp=f"{NOW - 1}.9999996"), id="timestamp-rounds-up-to-signed"),
    pytest.param(Case(True, timestamp=f"{NOW}.9999994"), id="timestamp-floors-to-signed"),
    # rejected
    pytest.param(Case(False, body=BODY + b" "), id="tampered-body"),
    pytest.param(Case(False, body=BODY.decode().replace("42", "43")), id="tampered-str-body"),
    pytest.param(Case(False, secret=OTHER_SECRET), id="wrong-secret"),
    pytest.param(Case(False, msg_id="msg_other"), id="wrong-id"),
    pytest.param(Case(False, timestamp=str(NOW + 1)), id="timestamp-not-the-signed-one"),
    pytest.param(Case(False, timestamp=str(NOW - 301), signed_at=NOW - 301), id="stale"),
    pytest.param(Case(False, timestamp=str(NOW + 301), signed_at=NOW + 301), id="future"),
    pytest.param(Case(False, msg_id=None), id="missing-id"),
    pytest.param(Case(False, timestamp=None), id="missing-timestamp"),
    pytest.param(Case(False, signature=None), id="missing-signature"),
    pytest.param(Case(False, msg_id=""), id="empty-id"),
    pytest.param(Case(False, signature=""), id="empty-signature"),
    pytest.param(Case(False, timestamp="soon"), id="non-numeric-timestamp"),
    pytest.param(Case(False, timestamp="nan"), id="nan-timestamp"),
    pytest.param(Case(False, timestamp="inf"), id="inf-timestamp"),
    pytest.param(Case(False, timestamp=hex(NOW)), id="hex-timestamp"),
    pytest.param(Case(False, timestamp=f"{NOW - 1}.9999994"), id="timestamp-floors-below-signed"),
    pytest.param(Case(False, signature="v1,garbage"), id="garbage-signature"),
    pytest.param(Case(False, signature=f"v1,{ZERO_SIG}"), id="wrong-signature-bytes"),
    pytest.param(Case(False, signature="{good}"), id="bare-signature-no-version"),
    pytest.param(Case(False, signature="v2,{good}"), id="non-v1-version"),
    pytest.param(Case(False, signature="V1,{good}"), id="version-is-case-sensitive"),
    pytest.param(Case(False, signature="v1,{good},x"), id="extra-comma"),
    pytest.param(Case(False, signature="junk v1,{good}"), id="junk-before-match"),
    pytest.param(Case(False, signature="v1,{other}  v1,{good}"), id="double-space"),
    pytest.param(Case(False, signature="v1,{other}\tv1,{good}"), id="tab-separated"),
]


@pytest.mark.parametrize("case", AGREEMENT_CASES)
@pytest.mark.usefixtures("frozen_reference")
def test_agrees_with_reference(case: Case) -> None:
    headers = case.headers()
    assert ours_accepts(case.secret, case.body, headers) is case.expected
    assert reference_accepts(case.secret, case.body, headers) is case.expected


def test_frozen_clock_is_in_effect(frozen_reference: None) -> None:
    real_now = int(time.time())
    headers = webhook_headers([SECRET], MSG_ID, BODY, timestamp=real_now)
    assert not reference_accepts(SECRET, BODY, headers)
    assert reference_accepts(SECRET, BODY, webhook_headers([SECRET], MSG_ID, BODY, timestamp=NOW))


def test_known_answer_vector() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == expected


@pytest.mark.parametrize(
    ("msg_id", "ts", "body"),
    [(MSG_ID, NOW, BODY), ("msg_é", 0, b""), ("a.b.c", 2_000_000_000, b"[1, 2]\n")],
)
def test_sign_matches_reference(msg_id: str, ts: int, body: bytes) -> None:
    assert sign(SECRET, msg_id, ts, body) == "v1," + _reference_sig(SECRET, msg_id, ts, body)
    assert sign(SECRET, msg_id, ts, body) != sign(OTHER_SECRET, msg_id, ts, body)


def test_our_headers_verify_with_reference_at_real_time() -> None:
    headers = webhook_headers([SECRET], MSG_ID, BODY)
    assert set(headers) == set(HEADER_NAMES)
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5
    assert Webhook(SECRET).verify(BODY, headers) == {
        "type": "order.created",
        "data": {"id": 42, "note": "café ☕"},
    }
    verify(SECRET, BODY, headers)


def test_reference_signed_verifies_with_ours_at_real_time() -> None:
    sent_at = datetime.now(tz=UTC)
    headers = {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(MSG_ID, sent_at, BODY.decode()),
    }
    verify(SECRET, BODY, headers)
    with pytest.raises(InvalidSignature):
        verify(OTHER_SECRET, BODY, headers)


@pytest.mark.usefixtures("frozen_reference")
def test_rotation_header_verifies_with_either_secret() -> None:
    headers = webhook_headers([SECRET, OTHER_SECRET], MSG_ID, BODY, timestamp=NOW)
    entries = headers["webhook-signature"].split(" ")
    assert entries == [sign(SECRET, MSG_ID, NOW, BODY), sign(OTHER_SECRET, MSG_ID, NOW, BODY)]
    for secret in (SECRET, OTHER_SECRET):
        assert ours_accepts(secret, BODY, headers)
        assert reference_accepts(secret, BODY, headers)
    assert not ours_accepts(THIRD_SECRET, BODY, headers)
    assert not reference_accepts(THIRD_SECRET, BODY, headers)


def test_signature_header_argument_errors() -> None:
    with pytest.raises(InvalidEndpoint, match="at least one"):
        signature_header([], MSG_ID, NOW, BODY)
    with pytest.raises(TypeError, match="single str"):
        signature_header(SECRET, MSG_ID, NOW, BODY)
    with pytest.raises(TypeError, match="integer"):
        sign(SECRET, MSG_ID, NOW + 0.5, BODY)  # type: ignore[arg-type]


def test_generate_secret_format() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_")
    raw = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    assert len(raw) == 32
    assert decode_secret(secret) == raw
    assert Webhook(secret)._whsecret == raw
    assert generate_secret() != secret


@pytest.mark.parametrize(
    "secret",
    [
        SECRET,
        SECRET.removeprefix(SECRET_PREFIX),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "A" * 86,
    ],
)
def test_decode_secret_matches_reference_key(secret: str) -> None:
    assert decode_secret(secret) == Webhook(secret)._whsecret


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("whsec_not*base64!secret-value-xyz", "base64"),
        ("whsec_" + base64.urlsafe_b64encode(b"\xfb" * 32).decode(), "base64"),
        (SECRET + "\n", "base64"),
        ("whsec_" + "A" * 29, "base64"),
        ("whsec_" + base64.b64encode(b"s" * 23).decode(), "got 23"),
        ("whsec_" + base64.b64encode(b"L" * 65).decode(), "got 65"),
        ("whsec_", "got 0"),
    ],
)
def test_decode_secret_errors_never_contain_the_secret(secret: str, reason: str) -> None:
    with pytest.raises(InvalidEndpoint, match=reason) as info:
        decode_secret(secret)
    message = str(info.value)
    assert "\n" not in message
    body = secret.removeprefix(SECRET_PREFIX).strip()
    if body:
        assert body not in message
        assert body[:8] not in message
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__ or info.value.__context__ is None


def test_verify_with_bad_secret_is_a_configuration_error() -> None:
    headers = webhook_headers([SECRET], MSG_ID, BODY, timestamp=NOW)
    with pytest.raises(InvalidEndpoint):
        verify("whsec_short", BODY, headers, now=NOW)


def test_non_utf8_body_rejected_like_reference() -> None:
    body = b"\xff\xfe not utf-8"
    headers = webhook_headers([SECRET], MSG_ID, body)
    with pytest.raises(UnicodeDecodeError):
        Webhook(SECRET).verify(body, headers, json_parse=False)
    with pytest.raises(InvalidSignature, match="UTF-8"):
        verify(SECRET, body, headers)


def test_verify_accepts_any_header_mapping() -> None:
    headers = webhook_headers([SECRET], MSG_ID, BODY, timestamp=NOW)
    verify(SECRET, BODY, MappingProxyType(headers), now=NOW)
    verify(SECRET, BODY, httpx.Headers({k.upper(): v for k, v in headers.items()}), now=NOW)
    tampered = httpx.Headers({**headers, "webhook-id": "msg_other"})
    with pytest.raises(InvalidSignature):
        verify(SECRET, BODY, tampered, now=NOW)


def test_tolerance_is_configurable_and_symmetric() -> None:
    for offset, ok in [(-10, True), (10, True), (-11, False), (11, False)]:
        headers = webhook_headers([SECRET], MSG_ID, BODY, timestamp=NOW + offset)
        if ok:
            verify(SECRET, BODY, headers, tolerance_seconds=10, now=NOW)
        else:
            with pytest.raises(InvalidSignature, match="too"):
                verify(SECRET, BODY, headers, tolerance_seconds=10, now=NOW)
