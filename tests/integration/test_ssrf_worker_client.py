"""The SSRF guard on the worker's real transport (httpx API over aiohttp), real sockets.

aiohttp connects to exactly what its resolver returns, so :class:`GuardedResolver` is the
pin; these tests drive ``make_client(resolver=...)`` with a scripted resolver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.sender import make_client
from outbox.ssrf import BlockedAddress, IPNetwork, blocked_reason, parse_networks
from tests.integration.test_ssrf_transport import EchoServer, Stub, _serve

LOOPBACK = parse_networks("127.0.0.1/32")


@pytest.fixture
def server() -> Iterator[EchoServer]:
    with _serve() as echo:
        yield echo


async def _get(resolver: GuardedResolver, url: str, times: int = 1) -> list[str]:
    """GET ``url`` ``times`` times, each on a fresh connection; the bodies (Host seen)."""
    out = []
    async with make_client(resolver=resolver) as client:
        for _ in range(times):
            response = await client.get(url, headers={"connection": "close"})
            out.append(response.text)
    return out


def _blocked(resolver: GuardedResolver, url: str) -> str:
    with pytest.raises(Exception) as info:
        asyncio.run(_get(resolver, url))
    reason = blocked_reason(info.value)
    assert reason is not None, f"not refused by the guard: {info.value!r}"
    return reason


def test_public_name_resolving_private_is_refused(server: EchoServer) -> None:
    stub = Stub("public.example", ["10.0.0.1"])
    reason = _blocked(GuardedResolver((), resolver=stub), "http://public.example:80/x")
    assert "public.example resolves to 10.0.0.1 (private" in reason
    assert server.seen == []


def test_allowed_name_reaches_the_checked_address_with_its_host(server: EchoServer) -> None:
    port = server.server_address[1]
    stub = Stub("hooks.example", ["127.0.0.1"])
    got = asyncio.run(_get(GuardedResolver(LOOPBACK, resolver=stub),
                           f"http://hooks.example:{port}/in"))
    assert got == [f"hooks.example:{port}"]
    assert [s.path for s in server.seen] == ["/in"]


def test_rebinding_is_checked_on_every_new_connection(server: EchoServer) -> None:
    port = server.server_address[1]
    stub = Stub("rebind.example", ["127.0.0.1"], ["10.0.0.1"])
    resolver = GuardedResolver(LOOPBACK, resolver=stub)
    url = f"http://rebind.example:{port}/r"

    async def twice() -> tuple[str, BaseException | None]:
        async with make_client(resolver=resolver) as client:
            first = (await client.get(url, headers={"connection": "close"})).text
            try:
                await client.get(url, headers={"connection": "close"})
            except Exception as exc:
                return first, exc
            return first, None

    first, second = asyncio.run(twice())
    assert first == f"rebind.example:{port}"
    assert second is not None and isinstance(_cause(second), BlockedAddress)
    assert len(stub.calls) == 2  # no DNS cache: the second connection looked again
    assert len(server.seen) == 1  # and never reached anything with the new answer


def _cause(exc: BaseException) -> BaseException | None:
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, BlockedAddress):
        seen = seen.__cause__ or seen.__context__
    return seen


@pytest.mark.parametrize(
    ("answers", "allow"),
    [(["8.8.8.8", "10.0.0.1"], ()), (["127.0.0.1", "::1"], LOOPBACK)],
)
def test_any_bad_answer_refuses(server: EchoServer, answers: list[str],
                                allow: tuple[IPNetwork, ...]) -> None:
    stub = Stub("mixed.example", answers)
    _blocked(GuardedResolver(allow, resolver=stub), "http://mixed.example:80/")
    assert server.seen == []


def test_environment_proxies_are_ignored(server: EchoServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    port = server.server_address[1]
    stub = Stub("hooks.example", ["127.0.0.1"])
    got = asyncio.run(_get(GuardedResolver(LOOPBACK, resolver=stub),
                           f"http://hooks.example:{port}/p"))
    assert got == [f"hooks.example:{port}"]  # went direct, not through the dead proxy
