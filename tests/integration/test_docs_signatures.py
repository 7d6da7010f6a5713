"""docs/guides/signatures.md: both ways of verifying v1a, run as written against requests
signed the way the worker signs them (outbox.signing.webhook_headers, which the worker's
request builder calls), including a rotation's two entries."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import outbox
from outbox.signing import generate_key_pair, generate_secret, webhook_headers
from tests.support.docs import snippet

BODY = b'{"type":"invoice.paid","data":{"invoice":42}}'


def _requests() -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(public keys [new, old], headers of a rotation's request, of an hmac one)."""
    (new, new_public), (old, old_public) = generate_key_pair(), generate_key_pair()
    rotating = webhook_headers([new, old], "msg_1", BODY)
    return [new_public, old_public], rotating, webhook_headers([generate_secret()], "m", BODY)


def _defined(name: str, marker: str, keys: list[str] | None = None) -> Callable[..., Any]:
    code = snippet("guides/signatures.md", marker)
    if keys is not None:
        code = code.replace('["whpk_..."]', repr(keys))
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    function: Callable[..., Any] = namespace[name]
    return function


def test_outbox_verify_snippet() -> None:
    keys, rotating, hmac_signed = _requests()
    for trusted in ([keys[0]], [keys[1]], keys):
        _defined("handle", "v1a-verify-outbox", trusted)(BODY, rotating)
    handle = _defined("handle", "v1a-verify-outbox", [generate_key_pair()[1]])
    with pytest.raises(outbox.InvalidSignature):
        handle(BODY, rotating)
    handle = _defined("handle", "v1a-verify-outbox", keys)
    for body, headers in ((BODY + b" ", rotating), (BODY, hmac_signed)):
        with pytest.raises(outbox.InvalidSignature):
            handle(body, headers)


def test_cryptography_only_snippet() -> None:
    verify_v1a = _defined("verify_v1a", "v1a-verify-cryptography")
    keys, rotating, hmac_signed = _requests()
    verify_v1a([keys[0]], BODY, rotating)
    verify_v1a([keys[1]], BODY, {k.title(): v for k, v in rotating.items()})
    stale = {**rotating, "webhook-timestamp": str(int(time.time()) - 600)}
    cases = [([generate_key_pair()[1]], BODY, rotating), (keys, BODY.replace(b"42", b"43"),
             rotating), (keys, BODY, hmac_signed), (keys, BODY, stale),
             (keys, BODY, {**rotating, "webhook-id": "msg_2"}),
             (keys, BODY, {"webhook-signature": rotating["webhook-signature"]})]
    for trusted, body, headers in cases:
        with pytest.raises(ValueError):
            verify_v1a(trusted, body, headers)
