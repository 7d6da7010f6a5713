"""OAuth2 client credentials at delivery time, with a real token server and a real receiver
that checks the bearer token (tests/support/oauth2.py) and one real in-process worker:
one token request per expiry (not one per delivery, concurrent deliveries share the one in
flight), one refresh on a 401, a token endpoint that fails is a failed attempt with a
readable error and the delivery goes through once it is back."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from outbox.admin.endpoint_oauth2 import OAuth2Options
from outbox.delivery.oauth2 import Client, TokenCache, TokenFailure, refresh_margin
from outbox.delivery.outcome import Verdict
from tests.support.cli import invoke
from tests.support.guarded_http import worker_transport
from tests.support.oauth2 import CLIENT_ID, CLIENT_SECRET, BearerReceiver, TokenServer
from tests.support.workers import add_endpoint, emit, rows, run_until, settings


def oauth2(server: TokenServer, scope: str | None = None) -> OAuth2Options:
    return OAuth2Options(oauth2_token_url=server.url, oauth2_client_id=CLIENT_ID,
                         oauth2_client_secret=CLIENT_SECRET, oauth2_scope=scope)


def attempts(db_url: str) -> list[tuple[str, str | None, str | None]]:
    return [(str(o), c, e) for o, c, e in rows(
        db_url, "SELECT outcome, error_class, error FROM outbox.delivery_attempt_log"
        " ORDER BY created_at, id")]


def test_many_deliveries_share_one_token_per_expiry(db_url: str) -> None:
    # a 6 s life is replaced 0.6 s early: more than a loaded machine takes from the cache
    # check to the receiver's (a 2 s life, replaced 0.2 s early, saw 401s under CI load)
    with TokenServer(expires_in=6.0, scope="hooks:write") as server, \
            BearerReceiver(server) as rx:
        server.delay = 0.3  # the first deliveries all wait on the one fetch in flight
        add_endpoint(db_url, rx.url, oauth2=oauth2(server, "hooks:write"))
        first = emit(db_url, 30)
        later: list[object] = []
        started = time.monotonic()

        def done() -> bool:
            if not later and len(rx.delivered()) == 30:
                # past the first token's life (6 s, replaced 0.6 s before): one new fetch
                time.sleep(max(0.0, started + 6.2 - time.monotonic()))
                later.extend(emit(db_url, 30))
            return len(rx.delivered()) == 60

        run_until(settings(db_url, http_timeout_seconds=3.0), done, timeout=30)
    assert rx.delivered() == {str(i) for i in [*first, *later]}
    assert rx.unauthorized() == 0
    assert server.count == 2, server.requests  # 60 deliveries, two expiry windows
    assert all(f == {"grant_type": ["client_credentials"], "scope": ["hooks:write"]}
               for f in server.requests)
    assert server.refused == 0
    assert {o for o, _, _ in attempts(db_url)} == {"delivered"}


def test_a_refused_token_is_refreshed_once_and_the_delivery_goes_through(db_url: str) -> None:
    with TokenServer(expires_in=3600) as server, BearerReceiver(server) as rx:
        add_endpoint(db_url, rx.url, oauth2=oauth2(server))
        emit(db_url, 1)
        revoked: list[bool] = []

        def two_phases() -> bool:
            if len(rx.delivered()) == 1 and not revoked:
                revoked.append(True)
                server.revoke()  # the token the worker holds is refused from now on
                emit(db_url, 10)
            return len(rx.delivered()) == 11

        run_until(settings(db_url), two_phases)
    # one fetch at start, then ONE refresh for the 401s of the revoked token
    assert server.count == 2, server.requests
    assert 1 <= rx.unauthorized() <= 10
    assert {token for _, token, status in rx.seen if status == 401} == {"tok-1"}
    outcomes = attempts(db_url)  # each 401 was retried within its attempt
    assert {o for o, _, _ in outcomes} == {"delivered"} and len(outcomes) == 11


def test_a_token_endpoint_that_is_down_fails_the_attempt_then_delivers(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    server = TokenServer(expires_in=60)
    with BearerReceiver(server) as rx:
        # registered while it is down; retried every ~0.5 s, past the 1 s a failure is
        # remembered for (FAILURE_HOLD) within two tries
        add_endpoint(db_url, rx.url, oauth2=oauth2(server), retry_base_seconds=0.4,
                     retry_cap_seconds=0.6)
        emit(db_url, 1)
        failed = "SELECT count(*) FROM outbox.delivery_attempts WHERE outcome = 'retry'"

        def back_after_two_failures() -> bool:
            if rows(db_url, failed)[0][0] >= 2 and server._server is None:
                server.start()
            return len(rx.delivered()) == 1

        caplog.set_level(logging.DEBUG)
        try:
            run_until(settings(db_url), back_after_two_failures)
        finally:
            server.stop()
    outcomes = attempts(db_url)
    assert outcomes[-1][0] == "delivered"
    retries = [a for a in outcomes if a[0] == "retry"]
    assert len(retries) >= 2
    for _, error_class, error in retries:
        assert error_class == "oauth2_token"
        assert error is not None
        assert error.startswith(f"OAuth2 token request to {server.url} failed: ")
        assert "connect" in error.lower()
    assert server.count == 1
    assert CLIENT_SECRET not in caplog.text and "tok-1" not in caplog.text


@pytest.mark.parametrize(("mode", "says"), [
    ("500", "HTTP 500: server_error (db down)"),
    ("html", "the answer is not a JSON object: <html>maintenance</html>"),
    ("no_token", "the answer has no access_token"),
])
def test_a_bad_token_answer_is_a_readable_retry(db_url: str, mode: str, says: str) -> None:
    with TokenServer() as server, BearerReceiver(server) as rx:
        server.mode = mode
        add_endpoint(db_url, rx.url, oauth2=oauth2(server), max_attempts=2)
        emit(db_url, 1)
        run_until(settings(db_url), lambda: len(attempts(db_url)) == 2)
    assert [(o, c) for o, c, _ in attempts(db_url)] == [("retry", "oauth2_token"),
                                                        ("exhausted", "oauth2_token")]
    error = attempts(db_url)[0][2] or ""
    assert error == f"OAuth2 token request to {server.url}: {says}", error
    assert rx.seen == []


def test_wrong_client_credentials_name_the_oauth2_error(db_url: str) -> None:
    with TokenServer() as server, BearerReceiver(server) as rx:
        wrong = OAuth2Options(oauth2_token_url=server.url, oauth2_client_id=CLIENT_ID,
                              oauth2_client_secret="not-the-secret")
        add_endpoint(db_url, rx.url, oauth2=wrong, max_attempts=1)
        emit(db_url, 1)
        run_until(settings(db_url), lambda: len(attempts(db_url)) == 1)
    ((outcome, error_class, error),) = attempts(db_url)
    assert (outcome, error_class) == ("exhausted", "oauth2_token")
    assert error == ("attempts exhausted (1/1): OAuth2 token request to"
                     f" {server.url}: HTTP 401: invalid_client (bad client)")
    assert server.refused == 1 and rx.seen == []


# --- the cache itself, over the worker's SSRF-guarded transport -------------------------

def test_concurrent_requests_share_one_fetch_and_the_expiry_margin() -> None:
    async def main(server: TokenServer) -> list[str]:
        async with worker_transport() as transport:
            cache = TokenCache()
            client = Client(server.url, CLIENT_ID, CLIENT_SECRET)
            got = await asyncio.gather(*(cache.token(client, transport, 5.0)
                                         for _ in range(50)))
            assert cache.fetches == 1 and server.count == 1
            cache.invalidate(client, "tok-other")  # not the cached one: kept
            assert await cache.token(client, transport, 5.0) == got[0]
            cache.invalidate(client, got[0])
            cache.invalidate(client, got[0])
            again = await asyncio.gather(*(cache.token(client, transport, 5.0)
                                           for _ in range(10)))
            assert cache.fetches == 2 and set(again) == {"tok-2"}
            return got

    with TokenServer() as server:
        server.delay = 0.2
        assert set(asyncio.run(main(server))) == {"tok-1"}
    assert refresh_margin(3600) == 30 and refresh_margin(2) == pytest.approx(0.2)


def test_a_token_answer_without_expires_in_lasts_the_documented_default() -> None:
    async def main(server: TokenServer) -> None:
        now = [1000.0]
        cache = TokenCache(clock=lambda: now[0])
        client = Client(server.url, CLIENT_ID, CLIENT_SECRET)
        async with worker_transport() as transport:
            await cache.token(client, transport, 5.0)
            now[0] += 300 - 30 - 0.5  # DEFAULT_EXPIRES_IN 300 s, refreshed 30 s before
            await cache.token(client, transport, 5.0)
            assert cache.fetches == 1
            now[0] += 1.0
            await cache.token(client, transport, 5.0)
            assert cache.fetches == 2

    with TokenServer(expires_in=None) as server:
        asyncio.run(main(server))


def test_the_token_url_is_checked_by_the_ssrf_guard_at_fetch_time() -> None:
    async def main(server: TokenServer) -> None:
        async with worker_transport(allow="10.0.0.0/8") as transport:
            cache = TokenCache()
            for url in (server.url, server.url.replace("127.0.0.1", "localhost")):
                with pytest.raises(TokenFailure) as caught:
                    await cache.token(Client(url, CLIENT_ID, CLIENT_SECRET), transport, 5.0)
                result = caught.value.result(1.0)
                assert (result.verdict, result.error_class) == (Verdict.DEAD, "ssrf"), result
                assert "OAUTH2" not in (result.error or "") and "127.0.0.1" in (result.error
                                                                                or "")
    with TokenServer() as server:
        asyncio.run(main(server))
        assert server.count == 0  # nothing reached it


def test_a_second_401_after_the_refresh_is_the_attempt_s_answer(db_url: str) -> None:
    with TokenServer() as server, BearerReceiver(TokenServer()) as rx:  # never valid there
        add_endpoint(db_url, rx.url, oauth2=oauth2(server))
        emit(db_url, 1)
        run_until(settings(db_url), lambda: len(attempts(db_url)) == 1)
    assert [(o, c) for o, c, _ in attempts(db_url)] == [("dead", "http_status")]
    assert [(token, status) for _, token, status in rx.seen] == [("tok-1", 401),
                                                                  ("tok-2", 401)]
    assert server.count == 2


def test_ping_sends_the_bearer_token_too(db_url: str) -> None:
    with TokenServer() as server, BearerReceiver(server) as rx:
        eid = add_endpoint(db_url, rx.url, oauth2=oauth2(server))
        done = invoke(db_url, "endpoints", "ping", str(eid),
                      env={"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"})
    assert done.exit_code == 0, done.output
    assert f"{rx.url}: 204" in done.output and CLIENT_SECRET not in done.output
    assert [(token, status) for _, token, status in rx.seen] == [("tok-1", 204)]
