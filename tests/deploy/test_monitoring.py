"""deploy/grafana and deploy/prometheus: PromQL parsed (``promql-parser``) and naming only the
worker's metrics; ``promtool`` checks the rules and runs their unit tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest

from tests.deploy.files import (
    DEPLOY,
    METRICS,
    SERIES,
    duration_seconds,
    load_yaml_docs,
    promql_selectors,
)


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (DEPLOY / "grafana" / "outbox-dashboard.json").read_text())
    return data


def dashboard_exprs() -> list[str]:
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            query = query["query"] if isinstance(query, dict) else query
            match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
            assert match, query
            exprs.append(match.group(1))
    return exprs


def test_promql_check_catches_unknown_metrics_and_syntax_errors() -> None:
    assert promql_selectors('sum(rate(outbox_deliveries_total{endpoint=~"$endpoint"}'
                            "[$__rate_interval]))") == ["outbox_deliveries_total"]
    with pytest.raises(ValueError):
        promql_selectors("sum(rate(outbox_deliveries_total[5m])")
    assert not set(promql_selectors("outbox_deliveries")) <= SERIES


def test_dashboard_uses_only_the_worker_metrics_and_all_of_them() -> None:
    used: set[str] = set()
    for expr in dashboard_exprs():
        names = promql_selectors(expr)
        assert names, expr
        assert set(names) <= SERIES, (expr, set(names) - SERIES)
        used.update(names)
    base = {re.sub(r"_(bucket|sum|count)$", "", n) if n not in METRICS else n for n in used}
    assert base == set(METRICS), set(METRICS) - base


def test_dashboard_panels_are_laid_out_and_sourced() -> None:
    board = dashboard()
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert any(v["type"] == "datasource" and v["query"] == "prometheus"
               for v in board["templating"]["list"])
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        assert p["datasource"]["uid"] == "${datasource}"
    titles = " | ".join(p["title"].lower() for p in panels)
    for word in ("outcome", "attempt duration", "lag", "backlog", "oldest", "in flight",
                 "database errors"):
        assert word in titles, word


def alert_rules() -> dict[str, dict[str, Any]]:
    doc = load_yaml_docs(DEPLOY / "prometheus" / "alerts.yaml")[0]
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


def test_alerts_use_only_the_worker_metrics() -> None:
    rules = alert_rules()
    assert set(rules) == {"OutboxDeliveriesPilingUp", "OutboxEndpointFailing",
                          "OutboxDeliveryPoisoned"}
    for rule in rules.values():
        names = promql_selectors(rule["expr"])
        assert set(names) <= SERIES, set(names) - SERIES
        assert rule["labels"]["severity"]
        assert rule["annotations"]["summary"]
    piling = rules["OutboxDeliveriesPilingUp"]
    assert {"outbox_oldest_due_age_seconds", "outbox_due_backlog"} <= set(
        promql_selectors(piling["expr"]))
    assert re.search(r"outbox_oldest_due_age_seconds\)\s*>\s*300\b", piling["expr"])
    assert duration_seconds(piling["for"]) == 600
    failing = rules["OutboxEndpointFailing"]
    assert "by (endpoint)" in failing["expr"]
    assert re.search(r"\)\s*>\s*0\.5\b", failing["expr"])
    assert duration_seconds(failing["for"]) == 900
    assert "outbox_poisoned_total" in rules["OutboxDeliveryPoisoned"]["expr"]


def test_promtool_checks_and_unit_tests_the_alerts() -> None:
    # deploy/dev.py test installs it (Debian package prometheus): missing here is a failure.
    assert shutil.which("promtool"), "promtool not installed (apt-get install prometheus)"
    prom = DEPLOY / "prometheus"
    for argv in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]):
        done = subprocess.run(["promtool", *argv], cwd=prom, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
