"""Redirects, proxies and timeouts on the path the worker really uses (real sockets).

``send`` over ``make_worker_transport(settings)``, as in ``test_ssrf_guard.py``: no redirect
is followed, no environment proxy is used, and connect, read, total and DNS timeouts end
the attempt as a RETRY.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import aiohttp
import httpx
import pytest

from outbox.delivery.outcome import AttemptResult, Verdict
from tests.support.guarded_http import (
    BODY,
    HOST,
    PUBLIC,
    Answer,
    Server,
    Stub,
    hang,
    post,
    reply,
    serving,
    trickle,
    worker_transport,
)

# -- redirects and proxies ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirect_is_not_followed(dns: Stub, status: int) -> None:
    dns.script(HOST, [PUBLIC])

    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC)), worker_transport() as transport:
            server.answer = reply(status, {"Location": server.url("/elsewhere")})
            return await post(transport, server.url("/hook")), server

    result, server = asyncio.run(go())
    assert (result.verdict, result.status_code, result.error_class) == (
        Verdict.DEAD, status, "redirect"), result
    assert result.error == f"redirect to {server.url('/elsewhere')} (not followed)"
    assert [s.path for s in server.requests] == ["/hook"]


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")


def test_environment_proxies_are_ignored(dns: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    dns.script(HOST, [PUBLIC])
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def go() -> tuple[AttemptResult, Server, Server]:
        async with serving(proxy := Server(PUBLIC), receiver := Server(PUBLIC)):
            for name in PROXY_VARIABLES:
                monkeypatch.setenv(name, f"http://{PUBLIC}:{proxy.port}")
                monkeypatch.setenv(name.lower(), f"http://{PUBLIC}:{proxy.port}")
            async with worker_transport() as transport:
                return await post(transport, receiver.url("/direct")), proxy, receiver

    result, proxy, receiver = asyncio.run(go())
    assert result.verdict is Verdict.DELIVERED, result
    assert [(s.path, s.host) for s in receiver.requests] == [
        ("/direct", f"{HOST}:{receiver.port}")]
    assert proxy.connections == []


def test_the_proxy_environment_of_that_test_is_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control for the test above: a client that trusts the environment uses the proxy."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    async def go() -> Server:
        async with serving(proxy := Server(PUBLIC)):
            monkeypatch.setenv("HTTP_PROXY", f"http://{PUBLIC}:{proxy.port}")
            async with aiohttp.ClientSession(trust_env=True) as session, \
                    session.post(f"http://{HOST}:9/via-proxy", data=BODY) as response:
                assert response.status == 200
            return proxy

    proxy = asyncio.run(go())
    assert [s.path for s in proxy.requests] == [f"http://{HOST}:9/via-proxy"]


# -- timeouts --------------------------------------------------------------------------------------


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port on 127.0.0.1 whose accept queue is full: new connects hang in SYN_SENT."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind((PUBLIC, 0))
        listener.listen(0)
        filler.connect(listener.getsockname())
        yield int(listener.getsockname()[1])


def test_connect_timeout_is_retry_timeout(dns: Stub, full_backlog: int) -> None:
    dns.script(HOST, [PUBLIC])

    async def go() -> AttemptResult:
        async with worker_transport() as transport:
            return await post(transport, f"http://{HOST}:{full_backlog}/",
                              timeout=httpx.Timeout(5.0, connect=0.3))

    result = asyncio.run(go())
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, "timeout", None), result
    # the 0.3 s connect timeout fired, not the 10 s total (which would say "total timeout")
    assert (result.error or "").startswith("timeout after"), result.error


@pytest.mark.parametrize(
    ("answer", "timeout", "total", "error"),
    [  # the error names the timeout that fired: read ("timeout after"; the 10 s total
        # would say "total timeout after 10.0s"), then the 0.5 s total
        (hang, httpx.Timeout(5.0, read=0.3), 10.0, "timeout after"),
        (trickle, httpx.Timeout(5.0), 0.5, "total timeout after 0.5s"),
    ],
    ids=["read", "total"],
)
def test_read_and_total_timeouts_are_retry_timeout(
    dns: Stub, answer: Answer, timeout: httpx.Timeout, total: float, error: str
) -> None:
    dns.script(HOST, [PUBLIC])

    async def go() -> tuple[AttemptResult, Server]:
        async with serving(server := Server(PUBLIC, answer=answer)), \
                worker_transport() as transport:
            return await post(transport, server.url(), timeout=timeout, total=total), server

    result, server = asyncio.run(go())
    assert (result.verdict, result.error_class, result.status_code) == (
        Verdict.RETRY, "timeout", None), result
    assert (result.error or "").startswith(error), result.error
    assert len(server.requests) == 1


@pytest.mark.parametrize(("name", "error"), [("slow.example.test", "timed out after 0.3s"),
                                             ("nx.example.test", "Name or service not known")])
def test_dns_failures_are_retry_dns(dns: Stub, name: str, error: str) -> None:
    dns.hang.add("slow.example.test")

    async def go() -> AttemptResult:
        async with worker_transport(connect_timeout=0.3) as transport:
            return await post(transport, f"http://{name}/")

    result = asyncio.run(go())
    assert (result.verdict, result.error_class) == (Verdict.RETRY, "dns"), result
    # a hanging lookup is ended by the 0.3 s lookup timeout, which names itself; the 10 s
    # total would have class "timeout" and say "total timeout after 10.0s"
    assert f"cannot resolve {name}" in (result.error or "") and error in (result.error or "")
