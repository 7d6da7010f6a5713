"""Hostile receivers, end to end through the worker: real sockets on 127.0.0.1."""

from __future__ import annotations

import pytest

from outbox.testing.receiver import Receiver
from tests.support.hostile import Behaviour, gzip_bomb
from tests.support.workers import add_endpoint, drain, emit, rows, settings

pytestmark = pytest.mark.slow  # hostile receivers run into the timeouts


def _attempt(db_url: str) -> tuple[object, ...]:
    (row,) = rows(db_url, "SELECT d.state, a.outcome, a.status_code, a.error_class, a.error,"
                          " length(a.response_excerpt), a.duration_ms"
                          " FROM outbox.deliveries d JOIN outbox.delivery_attempt_log a"
                          " ON a.delivery_id = d.id")
    return row


def _run(db_url: str, behaviour: Behaviour, **cfg: object) -> tuple[object, ...]:
    with Receiver(default=behaviour) as rx:
        add_endpoint(db_url, rx.url + "/hostile", max_attempts=5)
        emit(db_url, 1)
        drain(settings(db_url, **{"retry_base_seconds": 30, "retry_cap_seconds": 60, **cfg}))
        assert len(rx.received) == 1, "exactly one request: no redirect followed, no retry yet"
    return _attempt(db_url)


def test_redirect_is_not_followed(db_url: str) -> None:
    state, outcome, status, cls, error, _len, _ms = _run(
        db_url, Behaviour(redirect_to="http://169.254.169.254/latest/meta-data/"))
    assert (state, outcome, status, cls) == ("dead", "dead", 302, "redirect")
    assert "169.254.169.254" in str(error) and "not followed" in str(error)


def test_gzip_bomb_costs_nothing(db_url: str) -> None:
    gzip_bomb(1024)  # 1 GiB of zeros, ~1 MB compressed: built (and cached) once per process
    state, outcome, status, _cls, error, excerpt_len, _ms = _run(
        db_url, Behaviour(status=200, gzip_bomb_mb=1024))
    assert (state, outcome, status) == ("delivered", "delivered", 200)
    assert excerpt_len is not None and int(str(excerpt_len)) <= 16 * 1024
    # reading stopped at the cap: inflating the whole GiB would outlast the 2 s total
    # timeout and be noted as "body not fully read: total timeout"
    assert error is None, error


def test_trickling_receiver_hits_the_total_timeout(db_url: str) -> None:
    # headers arrive, then a byte every 0.5 s of a 1 MiB body: per-read timeouts never
    # fire, the total does (the error says so); without it the read would last 6 days
    state, outcome, status, cls, error, _len, _ms = _run(
        db_url, Behaviour(status=503, trickle=0.5), http_timeout_seconds=2.0)
    assert (state, outcome, status) == ("pending", "retry", 503)
    assert cls == "http_status"
    assert str(error).endswith("body not fully read: total timeout"), error


def test_trickle_before_status_is_a_timeout(db_url: str) -> None:
    state, outcome, status, cls, error, _len, _ms = _run(
        db_url, Behaviour(hang=True), http_timeout_seconds=1.0)
    assert (state, outcome, status, cls) == ("pending", "retry", None, "timeout")
    # the 1 s http timeout (read or total, whichever fired first) names itself
    assert error == "total timeout after 1.0s" or str(error).startswith("timeout after"), error


@pytest.mark.parametrize(
    ("behaviour", "classes"),
    [
        (Behaviour(reset=True), {"network", "protocol", "connect", "timeout"}),
        (Behaviour(garbage=True), {"protocol", "network", "connect", "timeout"}),
    ],
)
def test_broken_connections_are_retryable(db_url: str, behaviour: Behaviour,
                                          classes: set[str]) -> None:
    state, outcome, status, cls, error, _len, _ms = _run(db_url, behaviour)
    assert (state, outcome, status) == ("pending", "retry", None)
    assert cls in classes, f"{cls}: {error}"
