"""The worker's own process tunes its garbage collector for the run and puts it back after
(delivery/runner.py): a worker run inside a test's or an app's process leaves it as it was."""

from __future__ import annotations

import gc

from outbox.delivery import runner


def test_the_collector_is_tuned_for_the_run_and_put_back() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with runner._tuned_gc():
        assert gc.get_threshold()[0] == runner.GC_YOUNG_THRESHOLD
        assert gc.get_freeze_count() > frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
