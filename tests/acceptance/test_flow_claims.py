"""Claims take only what can start: a busy endpoint drains with no hand-back writes, and
a hanging endpoint holds at most its cap of a process's slots while others keep going."""

from __future__ import annotations

import subprocess

import pytest

from outbox.testing.receiver import Behaviour, Receiver
from tests.support.workers import (
    add_endpoint,
    emit,
    log_of,
    rows,
    spawn,
    states,
    wait_until,
)

pytestmark = pytest.mark.slow  # worker processes

EVENTS = 4000


def _totals(proc: subprocess.Popen[bytes]) -> dict[str, int]:
    line = [ln for ln in log_of(proc).splitlines() if ln.startswith("claimed=")][-1]
    return {k: int(v) for k, v in (item.split("=") for item in line.split())}


def test_a_busy_endpoint_drains_with_no_hand_backs(db_url: str) -> None:
    """One endpoint, 4,000 deliveries, two ``outbox worker --drain`` processes at default
    settings and at concurrency 100 (cap 25 each: the endpoint's cap binds): every row is
    claimed about once, never handed
    back (the claim takes no more of the endpoint than the process's free slots there)."""
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/hot")
        emit(db_url, EVENTS)
        procs = [spawn(db_url, "--drain", OUTBOX_WAKEUP="notify"),
                 spawn(db_url, "--drain", OUTBOX_WAKEUP="notify", OUTBOX_CONCURRENCY="100")]
        for p in procs:
            assert p.wait(timeout=240) == 0, log_of(p)[-2000:]
    assert states(db_url) == {"delivered": EVENTS}
    totals = [_totals(p) for p in procs]
    assert sum(t["handbacks"] for t in totals) == 0, totals
    claimed = sum(t["claimed"] for t in totals)
    assert claimed <= EVENTS * 1.02, totals
    (refunds,), = rows(db_url, "SELECT count(*) FROM outbox.deliveries WHERE attempts <> 1")
    assert refunds == 0  # each delivered at its first attempt, nothing re-claimed


def test_a_hanging_endpoint_holds_at_most_its_cap(db_url: str) -> None:
    """An endpoint that hangs holds at most its cap (here 5 of 20) of the process's slots:
    the other endpoint's 1,000 deliveries drain meanwhile, and the hanging one's rows wait
    in the database, not in hand-backs."""
    with Receiver() as rx:
        rx.script("/hang", [Behaviour(delay=4.0)] * 10_000)
        hang = add_endpoint(db_url, rx.url + "/hang", event_types=["hang.event"])
        add_endpoint(db_url, rx.url + "/ok", event_types=["ok.event"])
        emit(db_url, 200, "hang.event")
        emit(db_url, 1000, "ok.event")
        proc = spawn(db_url, OUTBOX_CONCURRENCY="20", OUTBOX_ENDPOINT_MAX_IN_FLIGHT="5",
                     OUTBOX_HTTP_TIMEOUT_SECONDS="30", OUTBOX_LEASE_SECONDS="60")
        try:
            ok_done = ("SELECT count(*) FROM outbox.deliveries d JOIN outbox.endpoints e"
                       " ON e.id = d.endpoint_id WHERE e.url LIKE '%%/ok'"
                       " AND d.state = 'delivered'")
            wait_until(lambda: rows(db_url, ok_done) == [(1000,)], 60, "the other endpoint")
            (leased,), = rows(db_url, "SELECT count(*) FROM outbox.deliveries"
                              " WHERE endpoint_id = %s AND lease_token IS NOT NULL", (hang,))
            assert leased <= 5
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    assert _totals(proc)["handbacks"] == 0
