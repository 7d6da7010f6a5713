"""``send`` over the worker's transport against real receivers on 127.0.0.1.

Moved here from the respx tests of ``tests/unit/test_sender.py`` when the sender stopped
speaking httpx: statuses on the wire, the body cap (also after
decompression, and its memory bound under a compression bomb), the total deadline
before and after the status line, a body cut by the receiver, failures before any
status, and cancellation. The verdict rules themselves are unit-tested there.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import tracemalloc
import zlib
from typing import Any

import pytest

from outbox._security.ssrf import parse_networks
from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.sender import DEFAULT_BODY_CAP, PhaseTimeouts, make_transport, send
from outbox.testing.receiver import Receiver
from tests.support.guarded_http import Server, serving
from tests.support.hostile import Behaviour, gzip_bomb

BODY = b'{"type":"order.paid"}'
TIMEOUT = PhaseTimeouts(connect=2.0)


async def _post(url: str, *, total: float = 5.0, cap: int = DEFAULT_BODY_CAP) -> AttemptResult:
    guard = GuardedResolver(parse_networks("127.0.0.0/8"))
    async with make_transport(resolver=guard) as transport:
        return await send(transport, url, BODY, {"webhook-id": "msg_1"}, timeout=TIMEOUT,
                          total_timeout=total, body_cap=cap)


def _answer(behaviour: Behaviour, *, total: float = 5.0, cap: int = DEFAULT_BODY_CAP
            ) -> tuple[AttemptResult, int]:
    """The result of one POST to a receiver answering ``behaviour``; requests it saw."""
    with Receiver() as rx:
        rx.script("/hook", [behaviour])
        result = asyncio.run(_post(rx.url + "/hook", total=total, cap=cap))
        return result, len(rx.received)


@pytest.mark.parametrize(("status", "verdict"), [
    (200, Verdict.DELIVERED), (204, Verdict.DELIVERED), (503, Verdict.RETRY),
    (429, Verdict.RETRY), (410, Verdict.GONE), (404, Verdict.DEAD)])
def test_status_on_the_wire(status: int, verdict: Verdict) -> None:
    result, requests = _answer(Behaviour(status=status, body=b"" if status == 204 else b"ok"))
    assert (result.verdict, result.status_code, requests) == (verdict, status, 1)
    assert result.response_excerpt == (None if status == 204 else "ok")
    assert result.duration_ms > 0


def test_retry_after_on_the_wire() -> None:
    result, _ = _answer(Behaviour(status=429, headers={"Retry-After": "120"}))
    assert result.retry_after_seconds == 120.0


@pytest.mark.parametrize(("size", "cap"), [(100_000, DEFAULT_BODY_CAP), (5000, 1000), (10, 0)])
def test_body_is_cut_at_cap(size: int, cap: int) -> None:
    result, _ = _answer(Behaviour(body=b"a" * size), cap=cap)
    assert result.verdict is Verdict.DELIVERED
    assert len(result.response_excerpt or "") == min(size, cap)


def test_multibyte_char_cut_at_cap_is_replaced() -> None:
    result, _ = _answer(Behaviour(body="é".encode() * 10), cap=5)
    assert result.response_excerpt == "éé\ufffd"


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_cap_applies_to_the_decoded_body(encoding: str) -> None:
    text = b"0123456789" * 1000
    packed = gzip.compress(text) if encoding == "gzip" else zlib.compress(text)
    result, _ = _answer(Behaviour(body=packed, headers={"Content-Encoding": encoding}),
                        cap=1000)
    assert result.verdict is Verdict.DELIVERED
    assert result.response_excerpt == text[:1000].decode()


def test_compression_bomb_costs_one_cap_of_memory() -> None:
    gzip_bomb(64)  # built (and cached) before measuring
    tracemalloc.start()
    try:
        result, _ = _answer(Behaviour(gzip_bomb_mb=64), cap=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.verdict is Verdict.DELIVERED
    assert result.response_excerpt == "\0" * 1000
    # inflating one network read whole would hold megabytes (64 KiB of this bomb
    # inflates to 64 MiB); the receiver's thread and the client hold far less
    assert peak < 8 * 1024 * 1024, peak


def test_corrupt_compressed_body_keeps_the_status_verdict() -> None:
    result, _ = _answer(Behaviour(body=b"not gzip at all", headers={"Content-Encoding": "gzip"}))
    assert result.verdict is Verdict.DELIVERED
    assert result.error == "body not fully read: ContentDecodingError"


def test_total_deadline_before_status_is_retry_timeout() -> None:
    result, _ = _answer(Behaviour(hang=True), total=0.2)
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, "timeout", None)
    assert result.error == "total timeout after 0.2s"
    # duration_ms covers the wait for the deadline (a lower bound, as a share of the
    # configured total: a sleep never ends early, and a loaded machine only adds to it)
    assert result.duration_ms >= 0.75 * 0.2 * 1000.0


@pytest.mark.parametrize(
    ("status", "verdict", "error"),
    [
        (200, Verdict.DELIVERED, "body not fully read: total timeout"),
        (503, Verdict.RETRY, "HTTP 503; body not fully read: total timeout"),
    ],
)
def test_trickling_body_is_cut_by_total_deadline(status: int, verdict: Verdict, error: str) -> None:
    result, _ = _answer(Behaviour(status=status, trickle=0.05), total=0.3)
    assert result.verdict is verdict
    assert result.error == error
    assert result.response_excerpt
    assert len(result.response_excerpt) < 20  # of 1 MiB announced: the deadline cut it


async def _cut_body(writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nxx")
    await writer.drain()
    return False  # close: 8 announced bytes never come


def test_body_cut_by_the_receiver_keeps_the_status_verdict() -> None:
    async def go() -> AttemptResult:
        async with serving(server := Server(answer=_cut_body)):
            return await _post(server.url(host="127.0.0.1"))

    result = asyncio.run(go())
    assert result.verdict is Verdict.DELIVERED
    assert result.response_excerpt == "xx"
    assert result.error == "body not fully read: Disconnected"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("behaviour", "error_class"), [
    (Behaviour(reset=True), "network"), (Behaviour(garbage=True), "protocol")])
def test_failure_before_status_is_retry(behaviour: Behaviour, error_class: str) -> None:
    result, _ = _answer(behaviour)
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, error_class, None), result
    assert result.error


def test_refused_connection_is_retry_connect() -> None:
    result = asyncio.run(_post(f"http://127.0.0.1:{_closed_port()}/hook"))
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, "connect", None), result


def test_cancellation_propagates() -> None:
    with Receiver() as rx:
        rx.script("/hook", [Behaviour(hang=True)])

        async def scenario() -> None:
            task: asyncio.Task[AttemptResult] = asyncio.create_task(
                _post(rx.url + "/hook", total=10.0))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())


def test_a_fired_deadline_leaves_no_cancellation_behind() -> None:
    async def go() -> tuple[AttemptResult, int]:
        with Receiver() as rx:
            rx.script("/hook", [Behaviour(hang=True)])
            result = await _post(rx.url + "/hook", total=0.2)
        await asyncio.sleep(0.01)  # a leaked cancel of the deadline would be raised here
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelling()

    result, cancelling = asyncio.run(go())
    assert (result.verdict, result.error) == (Verdict.RETRY, "total timeout after 0.2s")
    assert cancelling == 0


def test_deadlines_of_concurrent_sends_are_their_own() -> None:
    with Receiver() as rx:
        rx.script("/slow", [Behaviour(hang=True)])

        async def go() -> list[AttemptResult]:
            guard = GuardedResolver(parse_networks("127.0.0.0/8"))
            async with make_transport(resolver=guard) as transport:
                def one(path: str, total: float) -> Any:
                    return send(transport, rx.url + path, BODY, {}, timeout=TIMEOUT,
                                total_timeout=total)

                return list(await asyncio.gather(one("/slow", 0.3), one("/fast", 0.3),
                                                 one("/slow", 0.6)))

        slow, fast, slower = asyncio.run(go())
    assert fast.verdict is Verdict.DELIVERED
    assert (slow.error, slower.error) == ("total timeout after 0.3s", "total timeout after 0.6s")
    assert slower.duration_ms >= 0.6 * 1000.0  # never early
