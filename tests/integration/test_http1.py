"""The worker's HTTP/1.1 client (``outbox.delivery.http1``) against raw receivers on
127.0.0.1: keep-alive reuse and when a connection is not reused, response framings
(chunked, read to EOF, 1xx before the answer), the request on the wire, and bad headers
refused before anything is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from outbox._security.ssrf import parse_networks
from outbox.delivery.outcome import AttemptResult, Verdict
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.sender import PhaseTimeouts, make_transport, send
from tests.support.guarded_http import Answer, Server, Stub, reply, serving

TIMEOUT = PhaseTimeouts(connect=2.0)


async def _posts(url: str, n: int, headers: Mapping[str, str] | None = None
                 ) -> list[AttemptResult]:
    guard = GuardedResolver(parse_networks("127.0.0.0/8"))
    async with make_transport(resolver=guard) as transport:
        return [await send(transport, url, b'{"n":1}', dict(headers or {}), timeout=TIMEOUT,
                           total_timeout=5.0) for _ in range(n)]


def _run(answer: Answer, n: int, headers: Mapping[str, str] | None = None
         ) -> tuple[list[AttemptResult], Server]:
    server = Server(host="127.0.0.1", answer=answer)

    async def go() -> list[AttemptResult]:
        async with serving(server):
            return await _posts(server.url(host="127.0.0.1"), n, headers)

    return asyncio.run(go()), server


def _raw(payload: bytes, keep: bool = True) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> bool:
        writer.write(payload)
        await writer.drain()
        return keep
    return answer


def test_keep_alive_reuses_one_connection() -> None:
    results, server = _run(reply(200), 5)
    assert [r.verdict for r in results] == [Verdict.DELIVERED] * 5
    assert len(server.connections) == 1 and len(server.requests) == 5


def test_connection_close_is_not_reused() -> None:
    results, server = _run(reply(200, close=True), 3)
    assert [r.status_code for r in results] == [200] * 3
    assert len(server.connections) == 3


def test_request_on_the_wire() -> None:
    seen: list[bytes] = []
    ports: list[int] = []

    async def go() -> None:
        async def capture(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(await reader.readuntil(b"\r\n\r\n"))
            seen.append(await reader.readexactly(7))
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
            writer.close()
        raw = await asyncio.start_server(capture, "127.0.0.1", 0)
        port = raw.sockets[0].getsockname()[1]
        ports.append(port)
        async with raw:
            (result,) = await _posts(f"http://127.0.0.1:{port}/in/box?a=b%20c", 1,
                                     {"webhook-id": "msg_1"})
        assert result.status_code == 204

    asyncio.run(go())
    head = seen[0].decode()
    assert head.startswith("POST /in/box?a=b%20c HTTP/1.1\r\n")
    fields = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if line)
    assert fields["host"] == f"127.0.0.1:{ports[0]}"
    assert fields["content-length"] == "7" and fields["webhook-id"] == "msg_1"
    assert seen[1] == b'{"n":1}'


def test_chunked_answer() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"2\r\nok\r\n3\r\n!!!\r\n0\r\n\r\n")
    results, server = _run(_raw(chunked), 2)
    assert [r.response_excerpt for r in results] == ["ok!!!"] * 2
    assert len(server.connections) == 1


def test_answer_read_to_the_end_of_the_connection() -> None:
    results, server = _run(_raw(b"HTTP/1.0 200 OK\r\n\r\nuntil eof", keep=False), 2)
    assert [(r.verdict, r.response_excerpt, r.error) for r in results] == \
        [(Verdict.DELIVERED, "until eof", None)] * 2
    assert len(server.connections) == 2


def test_informational_answer_before_the_status() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    results, _ = _run(_raw(answer), 2)
    assert [(r.status_code, r.response_excerpt) for r in results] == [(201, "ok")] * 2


def test_invalid_answer_is_a_protocol_error() -> None:
    results, _ = _run(_raw(b"HTTX/9 what\r\n\r\n"), 1)
    assert (results[0].verdict, results[0].error_class) == (Verdict.RETRY, "protocol")


@pytest.mark.parametrize("headers", [{"x-evil": "a\r\nx-injected: 1"}, {"x-evil\n": "a"},
                                     {"x-evil": "a\rb"}])
def test_header_with_a_line_break_is_refused_unsent(headers: dict[str, str]) -> None:
    results, server = _run(reply(200), 1, headers)
    assert results[0].verdict is Verdict.RETRY
    assert "line break" in (results[0].error or "")
    assert server.requests == []


def test_idle_connection_closed_by_the_receiver_is_not_reused() -> None:
    async def once(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        return False  # closes without saying so (no Connection: close)

    server = Server(host="127.0.0.1", answer=once)

    async def go() -> list[AttemptResult]:
        async with serving(server):
            guard = GuardedResolver(parse_networks("127.0.0.0/8"))
            async with make_transport(resolver=guard) as transport:
                out = []
                for _ in range(3):
                    out.append(await send(transport, server.url(host="127.0.0.1"), b"{}", {},
                                          timeout=TIMEOUT, total_timeout=5.0))
                    await asyncio.sleep(0.1)  # the close reaches the idle connection
                return out

    results = asyncio.run(go())
    assert [r.verdict for r in results] == [Verdict.DELIVERED] * 3
    assert len(server.connections) == 3


def test_runs_on_uvloop() -> None:
    """uvloop's transports are not ``asyncio.Transport`` subclasses: the client must not
    depend on it (an app may run the sender on uvloop)."""
    import uvloop

    server = Server(host="127.0.0.1", answer=reply(200))

    async def go() -> list[AttemptResult]:
        async with serving(server):
            return await _posts(server.url(host="127.0.0.1"), 3)

    results = uvloop.run(go())
    assert [r.verdict for r in results] == [Verdict.DELIVERED] * 3
    assert len(server.connections) == 1


def test_bytes_past_the_announced_length_end_the_connection() -> None:
    """A receiver whose Content-Length is short of what it sends (counting characters, not
    bytes): each answer is read as announced, and the connection is not reused, so the
    next request never reads the leftovers as its answer."""
    results, server = _run(_raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\xc3\xa9"), 3)
    assert [(r.verdict, r.response_excerpt, r.error) for r in results] == \
        [(Verdict.DELIVERED, "ok", None)] * 3
    assert len(server.connections) == 3


def test_a_second_answer_in_the_same_bytes_is_never_taken() -> None:
    answer = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
              b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\nno")
    results, server = _run(_raw(answer), 3)
    assert [(r.status_code, r.response_excerpt) for r in results] == [(200, "ok")] * 3
    assert len(server.connections) == 3


@pytest.mark.parametrize("head", [
    b"X-Big: " + b"a" * 200_000 + b"\r\n",  # one header larger than the limit
    b"".join(b"X-%d: v\r\n" % i for i in range(300)),  # more header lines than allowed
])
def test_an_oversized_head_is_refused(head: bytes) -> None:
    results, _ = _run(_raw(b"HTTP/1.1 200 OK\r\n" + head + b"Content-Length: 2\r\n\r\nok"), 1)
    assert (results[0].verdict, results[0].error_class) == (Verdict.RETRY, "protocol")
    assert "too large" in (results[0].error or "")


def test_a_numeric_looking_name_goes_through_the_resolver() -> None:
    """``127.0.0.1.`` is no IP literal (the trailing dot makes it a name): it is resolved
    by the SSRF guard, whose answer (loopback) is refused, not handed to the socket layer
    to resolve unchecked."""
    server = Server(host="127.0.0.1", answer=reply(200))
    stub = Stub()
    stub.script("127.0.0.1.", ["127.0.0.1"])

    async def go() -> AttemptResult:
        async with serving(server), \
                make_transport(resolver=GuardedResolver(resolver=stub)) as transport:
            return await send(transport, f"http://127.0.0.1.:{server.port}/hook", b"{}", {},
                              timeout=TIMEOUT, total_timeout=5.0)

    result = asyncio.run(go())
    assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf")
    assert [host for host, _ in stub.calls] == ["127.0.0.1."]
    assert server.connections == []
