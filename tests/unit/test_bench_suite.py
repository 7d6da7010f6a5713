"""bench.suite's table: rows, ratios and verdicts from given results (no benchmark runs)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import suite


def results() -> dict[str, Any]:
    """A full set of section results shaped like the benchmark modules' (made-up figures)."""
    return {
        "emit": {"plain_tx_ms": {"p50": 0.2}, "emit_tx_ms": {"p50": 0.38},
                 "second_insert_tx_ms": {"p50": 0.25},
                 "emit_many_1000_events_per_s": 43_900.0},
        "throughput": {"raw": {"stack_per_s": 1500.0},
                       "workers_1": {"deliveries_per_s": 1000.0},
                       "workers_2": {"deliveries_per_s": 1470.0}},
        "latency": {"latency_ms": {"p50": 5.7, "p99": 45.0}},
        "tenants": {"few_endpoints_tx_ms": {"p50": 0.40}, "many_endpoints_tx_ms": {"p50": 0.46},
                    "emit_many_100_tenants_events_per_s": 61_000.0},
        "pgqueuer": {"median_rate_by_batch": {"10": 4200.0}},
        "procrastinate": {"median_rate": 700.0},
        "history": {"empty_ms": {"p50": 4.41}, "history_ms": {"p50": 4.52}},
        "fairness": {"all healthy": 800.0, "one hanging": 880.0, "one failing (500)": 700.0},
        "neighbour": {"quiet_latency_ms": {"p50": 12.0, "p99": 2100.0},
                      "alone": {"deliveries_per_s": 2000.0},
                      "with_quiet": {"deliveries_per_s": 1900.0}},
        "memory": {"peak_rss_mb": 104.0, "idle_rss_mb": 75.0, "all_in_flight": True},
        "cpu": {"worker_cpu_us_per_delivery": 240.0, "bareloop_cpu_us_per_delivery": 170.0,
                "worker_cpu_us_per_delivery_gross": 300.0,
                "bareloop_cpu_us_per_delivery_gross": 190.0},
        "processes": {"auto_per_s": 2300.0, "separate_per_s": 2400.0,
                      "auto_cpu_us_per_delivery": 300.0, "separate_cpu_us_per_delivery": 310.0},
        "web": {"slowest_median_ms": 172.0, "all_answered": True},
        "ordering": {"ordered_per_second": 2100.0, "unordered_per_second": 2400.0,
                     "hot_key_per_second": 150.0},
        "wakeup": {"latency": {"notify": {"latency_ms": {"p50": 3.1, "p90": 11.0}}},
                   "idle_tx_per_s": {"notify": 0.7},
                   "emit_16": {"batch_1": {"tx_per_s": {
                       "off": 4000.0, "sentinel, workers busy": 3900.0,
                       "notify every transaction": 2800.0}},
                       "batch_100": {"tx_per_s": {"off": 700.0,
                                                  "sentinel, workers busy": 600.0}}}},
        "flow": {"hot": {"default": {"deliveries_per_s": 4600.0, "arrivals_per_s": 5600.0,
                                     "claims_per_delivery": 1.0},
                         "cap_lifted": {"deliveries_per_s": 5000.0}},
                 "peer_post": {"median_rate": 2000.0, "median_arrivals_per_s": 4000.0},
                 "limit50": {"limited_per_s": 49.5, "limited_max_in_one_second": 101,
                             "unlimited_per_s": 1800.0, "unlimited_alone_per_s": 2000.0,
                             "unlimited_ratio_median_of_pairs": 0.9},
                 "gateway": {"after_10s_429_share": 0.04, "after_10s_delivered_per_s": 65.0},
                 "limitcost": {"alone": {"worker_cpu_us_per_delivery": 380.0},
                               "beside_limited": {"worker_cpu_us_per_delivery": 410.0}},
                 "slow": {"default": {"deliveries_per_s_per_process": 1600.0,
                                      "complete": True},
                          "100": {"deliveries_per_s_per_process": 390.0},
                          "aiohttp_sink": {"deliveries_per_s_per_process": 1300.0}}},
    }


def by_label(rows: list[suite.Row]) -> dict[str, suite.Row]:
    return {r.target: r for r in rows}


def test_every_target_judged_from_full_results() -> None:
    rows = by_label(suite.rows_for(list(suite.SECTIONS), results(), {}))
    assert len(rows) == len(suite.TARGETS)
    verdicts = {label: r.met for label, r in rows.items()}
    assert verdicts == {
        "(info) throughput, 1 worker vs raw HTTP stack": None,  # no target: shown only
        "throughput, 2 workers vs raw HTTP stack": True,
        "throughput, 2 workers vs pgqueuer no-op drain (batch 10)": False,  # 0.35x
        "throughput, 2 workers vs procrastinate no-op drain (conc. 50)": True,  # 2.1x
        "emit overhead, median app transaction": False,  # 1.9x > 1.3
        "reference: app transaction + a bare second INSERT": True,  # 1.25x
        "emit_many, 1,000 events": False,  # 43,900 < 50,000
        "emit, 100,000 tenants x 2 endpoints (quick: 10,000) vs one tenant's 2": False,  # 1.15x
        "emit_many, 1,000 events over 100 tenants (2 endpoints each)": True,
        "latency p50 at 500 events/s": True,
        "latency p99 at 500 events/s": True,
        "claim median, delivered history vs empty": True,  # 1.02x
        "fairness, tenth endpoint hanging": True,  # 1.1x
        "fairness, tenth endpoint answering 500": False,  # 0.875x < 0.9
        "noisy neighbour: quiet tenant p99 during a burst": False,  # 2,100 > 2,000 ms
        "noisy neighbour: burst drain rate vs the burst alone": True,  # 0.95x
        "ordered endpoint, 1,000 keys vs unordered, drain rate": True,  # 0.875x
        "(info) ordered endpoint, one hot key": None,
        "--processes auto vs separate workers, deliveries/s": True,  # 0.96x
        "(info) --processes auto vs separate workers, CPU per delivery": None,
        "web: slowest API list / console page, median": True,  # 172 < 200 ms
        "worker RSS, 1,000 requests in flight": True,
        "lone event, emit-commit to receipt p50 (OUTBOX_WAKEUP=notify)": True,
        "lone event, emit-commit to receipt p90 (OUTBOX_WAKEUP=notify)": False,  # 11 > 10
        "idle worker, transactions/s (OUTBOX_WAKEUP=notify)": True,
        "16 emitters, 1 event/tx, wake-up on (workers busy) vs off": True,  # 0.975x
        "16 emitters, 100-event emit_many/tx, wake-up on (workers busy) vs off": False,
        "(info) 16 emitters, 1 event/tx, NOTIFY in every tx vs off": None,
        "worker CPU per delivery vs bare loop, 2 processes (net of start-up)": True,  # 1.41x
        "(info) worker CPU per delivery vs bare loop, start-up included": None,
        "hot endpoint, 2 workers, default settings vs cap lifted": True,  # 0.92x
        "hot endpoint, claims per delivery (default settings)": True,
        "hot endpoint, 2 workers vs pgqueuer signing + POST handler (arrivals/s)": False,
        "(info) the same, ours from process start vs the peer's from its run loop": None,
        "hot endpoint, 2 workers (arrivals/s) vs pgqueuer no-op drain (run loop)": True,
        "(info) the same, ours from process start": None,
        "50/s limit, 4 workers: rate at the receiver": True,
        "50/s limit, 4 workers: most requests in one second": False,  # 101 > 100
        "50/s limit beside: unlimited endpoint vs alone, median of paired ratios": True,
        "limits beside: unlimited endpoint's worker CPU per delivery vs alone": False,  # 1.08x
        "429 above 100/s: 429 share after 10 s": True,
        "429 above 100/s: delivered/s after 10 s": False,  # 65 < 70
        "1,000 endpoints at 250 ms, per process, default settings, minimal receiver": True,
        "(info) 1,000 endpoints at 250 ms, per process, concurrency 100": None,
        "(info) 1,000 endpoints at 250 ms, per process, with the aiohttp sink": None,
    }


def test_row_cells() -> None:
    rows = by_label(suite.rows_for(list(suite.SECTIONS), results(), {}))
    pgq = rows["throughput, 2 workers vs pgqueuer no-op drain (batch 10)"]
    assert (pgq.ours, pgq.reference, pgq.ratio, pgq.target_value, pgq.verdict) == (
        "1,470 /s", "4,200 /s", "0.35x", ">= 1x", "no")
    emit = rows["emit overhead, median app transaction"]
    assert (emit.ours, emit.reference, emit.ratio, emit.target_value) == (
        "0.380 ms", "0.200 ms", "1.90x", "<= 1.3x")
    many = rows["emit_many, 1,000 events"]
    assert (many.reference, many.ratio, many.target_value) == ("-", "-", ">= 50,000 events/s")
    rss = rows["worker RSS, 1,000 requests in flight"]
    assert (rss.ours, rss.target_value, rss.verdict) == ("104 MB", "< 200 MB", "yes")


def test_limits_are_inclusive_where_the_target_says_so() -> None:
    res = results()
    res["latency"]["latency_ms"] = {"p50": 20.0, "p99": 100.0}
    res["memory"]["peak_rss_mb"] = 200.0
    rows = by_label(suite.rows_for(["latency", "memory"], res, {}))
    assert rows["latency p50 at 500 events/s"].met is True
    assert rows["latency p99 at 500 events/s"].met is True
    assert rows["worker RSS, 1,000 requests in flight"].met is False  # strictly under 200


def test_memory_needs_all_requests_in_flight() -> None:
    res = results()
    res["memory"]["all_in_flight"] = False
    row = by_label(suite.rows_for(["memory"], res, {}))["worker RSS, 1,000 requests in flight"]
    assert row.met is False and row.verdict == "no (all_in_flight is false)"


def test_failed_section_shows_its_error_and_others_still_judged() -> None:
    res = results()
    del res["throughput"]
    errors = {"throughput": "RuntimeError: sink saw 4999 distinct ids, expected 5000"}
    rows = by_label(suite.rows_for(list(suite.SECTIONS), res, errors))
    pgq = rows["throughput, 2 workers vs pgqueuer no-op drain (batch 10)"]
    assert pgq.met is None and pgq.verdict.startswith("error in throughput: RuntimeError")
    assert pgq.reference == "4,200 /s" and pgq.ours == "-"  # the peer's figure still shows
    assert rows["emit_many, 1,000 events"].met is False
    assert "sink saw" in suite.table(list(rows.values()))


def test_only_peer_lists_the_peer_rows_as_not_run_on_our_side() -> None:
    res = {k: v for k, v in results().items() if k in ("pgqueuer", "procrastinate")}
    rows = suite.rows_for(["pgqueuer", "procrastinate"], res, {})
    assert [r.target for r in rows] == [
        "throughput, 2 workers vs pgqueuer no-op drain (batch 10)",
        "throughput, 2 workers vs procrastinate no-op drain (conc. 50)",
        "hot endpoint, 2 workers (arrivals/s) vs pgqueuer no-op drain (run loop)",
        "(info) the same, ours from process start"]
    assert [r.verdict for r in rows] == ["not run (throughput)"] * 2 + ["not run (flow)"] * 2
    assert all(r.met is None for r in rows)
    assert [r.reference for r in rows] == ["4,200 /s", "700 /s", "4,200 /s", "4,200 /s"]


def test_select_expands_groups_keeps_run_order_and_rejects_unknown_names() -> None:
    assert suite.select(None) == list(suite.SECTIONS)
    assert suite.select("memory,peer") == ["pgqueuer", "procrastinate", "memory"]
    assert suite.select("history, emit") == ["emit", "history"]
    with pytest.raises(ValueError, match="unknown section 'nope'"):
        suite.select("emit,nope")


def test_table_is_aligned_markdown() -> None:
    text = suite.table(suite.rows_for(list(suite.SECTIONS), results(), {}))
    lines = text.splitlines()
    assert lines[0].startswith("| target ") and lines[0].endswith(" met? |")
    assert set(lines[1]) <= {"|", "-"}
    assert len({len(line) for line in lines}) == 1
    assert len(lines) == 2 + len(suite.TARGETS)


def test_lookup_and_compare() -> None:
    assert suite.lookup({"a": [{"b": 1}]}, ("a", 0, "b")) == 1
    assert suite.lookup({"a": {}}, ("a", "b", "c")) is None
    assert suite.lookup({"a": 3}, ("a", "b")) is None
    assert suite.compare(1.0, ">=", 1.0) and not suite.compare(1.0, "<", 1.0)
    with pytest.raises(ValueError):
        suite.compare(1.0, "==", 1.0)


def test_information_row_shows_its_ratio_without_a_verdict() -> None:
    rows = by_label(suite.rows_for(["throughput"], results(), {}))
    info = rows["(info) throughput, 1 worker vs raw HTTP stack"]
    assert (info.ratio, info.target_value, info.verdict, info.met) == ("0.67x", "-", "-", None)
