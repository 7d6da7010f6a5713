"""The worker's real transport (``make_transport`` + ``send``) against a real receiver."""

from __future__ import annotations

import asyncio

import httpx

from outbox._security.ssrf import parse_networks
from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.sender import Transport, make_transport, send
from outbox.testing.receiver import Behaviour, Receiver

TIMEOUT = httpx.Timeout(5.0, connect=2.0)
BODY = b'{"type":"order.paid","data":{"id":1}}'


async def _post(transport: Transport, url: str, n: int = 1,
                headers: dict[str, str] | None = None) -> list[AttemptResult]:
    return [await send(transport, url, BODY, headers or {"webhook-id": f"msg_{i}"},
                       timeout=TIMEOUT, total_timeout=5.0) for i in range(n)]


def test_post_arrives_whole_with_identity_encoding() -> None:
    with Receiver() as rx:
        rx.script("/in", [Behaviour(status=202, body=b"thanks")])

        async def go() -> list[AttemptResult]:
            async with make_transport(resolver=GuardedResolver(
                    parse_networks("127.0.0.0/8"))) as transport:
                return await _post(transport, rx.url + "/in")

        [result] = asyncio.run(go())
        [seen] = rx.received
    assert (result.verdict, result.status_code) == (Verdict.DELIVERED, 202)
    assert result.response_excerpt == "thanks"
    assert seen.body == BODY
    assert seen.headers["webhook-id"] == "msg_0"
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.headers["content-length"] == str(len(BODY))


def test_caller_may_set_accept_encoding_once() -> None:
    with Receiver() as rx:
        async def go() -> None:
            async with make_transport() as transport:
                await _post(transport, rx.url + "/e", headers={"Accept-Encoding": "gzip"})

        asyncio.run(go())
        [seen] = rx.received
    assert seen.headers["accept-encoding"] == "gzip"


def test_cookies_from_one_answer_are_never_sent_back() -> None:
    with Receiver() as rx:
        rx.script("/c", [Behaviour(headers={"Set-Cookie": "session=abc; Path=/"})] * 2)

        # a host name: aiohttp's default jar would keep this cookie (it skips IP hosts)
        url = rx.url.replace("127.0.0.1", "localhost") + "/c"

        async def go() -> list[AttemptResult]:
            async with make_transport() as transport:
                return await _post(transport, url, n=2)

        results = asyncio.run(go())
        received = rx.received
    assert [r.verdict for r in results] == [Verdict.DELIVERED] * 2
    assert len(received) == 2
    assert all("cookie" not in r.headers for r in received)


def test_ip_literal_outside_the_allowlist_is_refused_before_connecting() -> None:
    with Receiver() as rx:
        async def go() -> list[AttemptResult]:
            guard = GuardedResolver(parse_networks("10.99.0.0/16"))
            async with make_transport(resolver=guard) as transport:
                return await _post(transport, rx.url + "/x")

        [result] = asyncio.run(go())
        received = rx.received
    assert result.verdict is Verdict.DEAD
    assert result.error_class == "ssrf"
    assert received == []
