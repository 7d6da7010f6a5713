"""One endpoint's burst does not queue the others behind it (the fair claim)."""

from __future__ import annotations

from outbox.testing.receiver import Receiver
from tests.support.workers import add_endpoint, emit, rows, run_until, settings

BURST = 3000


def test_quiet_endpoint_is_served_while_a_burst_drains(db_url: str) -> None:
    with Receiver() as rx:
        noisy = add_endpoint(db_url, rx.url + "/noisy", event_types=["noisy.event"])
        quiet = add_endpoint(db_url, rx.url + "/quiet", event_types=["quiet.event"])
        emit(db_url, BURST, "noisy.event")  # the backlog comes first: older rows
        emit(db_url, 5, "quiet.event")
        # the per-endpoint in-flight cap out of the way (as a burst spread over several
        # endpoints would be): only the claim decides who goes first
        cfg = settings(db_url, concurrency=50, endpoint_max_in_flight=50)
        quiet_done = ("SELECT count(*) FROM outbox.deliveries"
                      " WHERE endpoint_id = %s AND state = 'delivered'")
        run_until(cfg, lambda: rows(db_url, quiet_done, (quiet,)) == [(5,)], timeout=120)
        # Order, not a clock: how many of the burst's deliveries were recorded no later
        # than the quiet endpoint's last one (completions are recorded in batches, so a
        # few hundred share its flush at most). A global FIFO claim serves all 3,000
        # older rows first.
        (noisy_before,), = rows(db_url, """
            SELECT count(*) FROM outbox.deliveries
             WHERE endpoint_id = %s AND state = 'delivered'
               AND finished_at <= (SELECT max(finished_at) FROM outbox.deliveries
                                    WHERE endpoint_id = %s)""", (noisy, quiet))
    assert noisy_before < 500, f"{noisy_before} of the burst went before the quiet endpoint"
    assert sum(1 for r in rx.received if r.path == "/quiet") >= 5
