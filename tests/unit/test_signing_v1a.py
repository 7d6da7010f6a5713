"""``v1a`` (Ed25519) signatures: what outbox sends is checked by the RFC 8032 reference
verifier (tests/support/rfc8032.py, not the ``cryptography`` calls outbox signs with) over
the spec's signed content ``{id}.{timestamp}.{body}``; :func:`outbox.signing.verify` given a
``whpk_`` key accepts exactly the matching ``v1a`` entries."""

from __future__ import annotations

import base64

import pytest

from outbox.errors import InvalidEndpoint, InvalidSignature
from outbox.signing import (
    PUBLIC_KEY_PREFIX,
    SECRET_KEY_PREFIX,
    check_key,
    generate_key_pair,
    generate_secret,
    public_key_of,
    sign,
    signature_header,
    verify,
    webhook_headers,
)
from tests.support import rfc8032

NOW = 1_700_000_000
BODY = b'{"type":"invoice.paid","data":{"n":1,"note":"caf\xc3\xa9"}}'


def _raw(key: str, prefix: str) -> bytes:
    assert key.startswith(prefix)
    return base64.b64decode(key[len(prefix):], validate=True)


def _independently_valid(public_key: str, header: str, msg_id: str, ts: int, body: bytes
                         ) -> list[bool]:
    """Each v1a entry of ``header`` checked by the RFC 8032 reference code over the
    spec's signed content."""
    content = msg_id.encode() + b"." + str(ts).encode() + b"." + body
    return [rfc8032.verify(_raw(public_key, PUBLIC_KEY_PREFIX),
                           content, base64.b64decode(entry.split(",", 1)[1], validate=True))
            for entry in header.split(" ") if entry.startswith("v1a,")]


def test_key_pair_format() -> None:
    secret, public = generate_key_pair()
    assert len(_raw(secret, SECRET_KEY_PREFIX)) == 32  # the RFC 8032 seed
    assert len(_raw(public, PUBLIC_KEY_PREFIX)) == 32  # the raw public key
    assert public_key_of(secret) == public
    assert generate_key_pair() != (secret, public)


def test_v1a_verifies_with_the_independent_implementation() -> None:
    secret, public = generate_key_pair()
    header = sign(secret, "msg_1", NOW, BODY)
    assert header.startswith("v1a,") and len(base64.b64decode(header[4:])) == 64
    assert _independently_valid(public, header, "msg_1", NOW, BODY) == [True]
    # the independent check is a real one: another body, id, time or key fails it
    assert _independently_valid(public, header, "msg_1", NOW, BODY + b" ") == [False]
    assert _independently_valid(public, header, "msg_2", NOW, BODY) == [False]
    assert _independently_valid(public, header, "msg_1", NOW + 1, BODY) == [False]
    assert _independently_valid(generate_key_pair()[1], header, "msg_1", NOW, BODY) == [False]


def test_rfc8032_reference_agrees_with_the_rfc_test_vector() -> None:
    # RFC 8032 section 7.1, TEST 2 (one-byte message 0x72)
    public = bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
    signature = bytes.fromhex(
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
        "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00")
    assert rfc8032.verify(public, b"\x72", signature)
    assert not rfc8032.verify(public, b"\x73", signature)


def test_rotation_header_carries_both_keys_and_mixes_with_v1() -> None:
    new_secret, new_public = generate_key_pair()
    old_secret, old_public = generate_key_pair()
    hmac_secret = generate_secret()
    header = signature_header([new_secret, old_secret, hmac_secret], "msg_1", NOW, BODY)
    entries = header.split(" ")
    assert [e.split(",")[0] for e in entries] == ["v1a", "v1a", "v1"]
    assert _independently_valid(new_public, header, "msg_1", NOW, BODY) == [True, False]
    assert _independently_valid(old_public, header, "msg_1", NOW, BODY) == [False, True]
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(NOW), "webhook-signature": header}
    for key in (new_public, old_public, hmac_secret):
        verify(key, BODY, headers, now=NOW)


def test_verify_accepts_v1a_and_refuses_tampering_and_wrong_keys() -> None:
    secret, public = generate_key_pair()
    headers = webhook_headers([secret], "msg_1", BODY, timestamp=NOW)
    verify(public, BODY, headers, now=NOW)
    verify(public, BODY.decode(), {k.upper(): v for k, v in headers.items()}, now=NOW)
    with pytest.raises(InvalidSignature, match="no matching v1a"):
        verify(public, BODY.replace(b"1", b"2"), headers, now=NOW)
    with pytest.raises(InvalidSignature, match="no matching v1a"):
        verify(generate_key_pair()[1], BODY, headers, now=NOW)
    with pytest.raises(InvalidSignature, match="no matching v1a"):
        verify(public, BODY, {**headers, "webhook-id": "msg_2"}, now=NOW)
    with pytest.raises(InvalidSignature, match="too old"):
        verify(public, BODY, headers, now=NOW + 301)
    # a v1-only header does not verify with a public key, nor a v1a-only one with a secret
    hmac_headers = webhook_headers([generate_secret()], "msg_1", BODY, timestamp=NOW)
    with pytest.raises(InvalidSignature, match="no matching v1a"):
        verify(public, BODY, hmac_headers, now=NOW)
    with pytest.raises(InvalidSignature, match="no matching v1 "):
        verify(generate_secret(), BODY, headers, now=NOW)


@pytest.mark.parametrize("signature", [
    "v1a,not base64!", "v1a", "v1a,AAAA,BBBB", "v1a," + base64.b64encode(b"x" * 63).decode(),
    "v1a," + base64.b64encode(b"\0" * 64).decode(),
])
def test_malformed_or_wrong_v1a_entries_are_refused(signature: str) -> None:
    _, public = generate_key_pair()
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(NOW),
               "webhook-signature": signature}
    with pytest.raises(InvalidSignature):
        verify(public, BODY, headers, now=NOW)


@pytest.mark.parametrize(("key", "message"), [
    ("whpk_" + base64.b64encode(b"k" * 31).decode(), "32 bytes, got 31"),
    ("whpk_not base64", "not valid standard base64"),
    ("whsk_" + base64.b64encode(b"k" * 32).decode(), "verify with its whpk_ public key"),
    ("whsec_!!", "not valid standard base64"),
])
def test_bad_verifying_keys_are_configuration_errors_that_never_echo_them(
        key: str, message: str) -> None:
    headers = {"webhook-id": "m", "webhook-timestamp": str(NOW), "webhook-signature": "v1a,AA=="}
    with pytest.raises(InvalidEndpoint, match=message) as caught:
        check_key(key)
    assert key[5:] not in str(caught.value)
    with pytest.raises(InvalidEndpoint, match=message) as caught:
        verify(key, BODY, headers, now=NOW)
    assert key[5:] not in str(caught.value)


def test_bad_secret_keys_never_echo_them() -> None:
    bad = "whsk_" + base64.b64encode(b"s" * 33).decode()
    with pytest.raises(InvalidEndpoint, match="32 bytes, got 33") as caught:
        sign(bad, "m", NOW, BODY)
    assert bad[5:] not in str(caught.value)
