"""Shared helpers of the deploy/ tests: the files parsed, the worker's settings and metrics."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from kubernetes_validate.utils import latest_version
from pydantic import AliasChoices

from outbox.delivery.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"

# The oldest Kubernetes these manifests promise to work on, and the newest schemas we have.
K8S_VERSIONS = ("1.27", latest_version())

BACKLOG_QUERY = (
    "SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND visible_at <= now()"
)

# The worker's metrics (delivery/metrics.py) and their types: the dashboard and the alerts
# may use nothing else.
METRICS = {
    "outbox_deliveries_total": "counter",
    "outbox_attempt_duration_seconds": "histogram",
    "outbox_delivery_lag_seconds": "histogram",
    "outbox_due_backlog": "gauge",
    "outbox_oldest_due_age_seconds": "gauge",
    "outbox_largest_tenant_due_backlog": "gauge",
    "outbox_in_flight": "gauge",
    "outbox_claimed_per_poll": "histogram",
    "outbox_database_errors_total": "counter",
    "outbox_poisoned_total": "counter",
}
SERIES = {
    name + suffix
    for name, kind in METRICS.items()
    for suffix in (("_bucket", "_sum", "_count") if kind == "histogram" else ("",))
}

# Settings the deployment files set that are not (yet) WorkerSettings fields.
PENDING_SETTINGS: set[str] = set()  # settings named in deploy/ before the code reads them


# ---------------------------------------------------------------------------------------
# helpers


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def k8s_resources() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(load_yaml_docs(path))
    return docs


def k8s_one(kind: str) -> dict[str, Any]:
    found = [d for d in k8s_resources() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def k8s_named(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in k8s_resources() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def env_sources(kind: str) -> dict[str, str]:
    """The ConfigMap and Secret a Deployment's or Job's container takes its env from."""
    sources = container(k8s_one(kind))["envFrom"]
    return {k: v["name"] for s in sources for k, v in s.items()}


def configmap_env() -> dict[str, str]:
    data: dict[str, str] = k8s_one("ConfigMap")["data"]
    return data


def default_grace() -> float:
    default = WorkerSettings.model_fields["shutdown_grace_seconds"].default
    assert isinstance(default, float)
    return default


def configured_grace(env: Mapping[str, str]) -> float:
    return float(env.get("OUTBOX_SHUTDOWN_GRACE_SECONDS", default_grace()))


def setting_names() -> set[str]:
    """Every environment variable WorkerSettings reads."""
    names = set(PENDING_SETTINGS)
    for name, field in WorkerSettings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(c for c in alias.choices if isinstance(c, str) and c.isupper())
        else:
            names.add("OUTBOX_" + name.upper())
    return names


def check_settings(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> WorkerSettings:
    """``env`` names only real settings, and the worker accepts their values."""
    unknown = {k for k in env if k.startswith("OUTBOX_")} - setting_names()
    assert not unknown, f"not worker settings (typo?): {sorted(unknown)}"
    for key in list(os.environ):
        if key.startswith("OUTBOX_") or key == "DATABASE_URL":
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return WorkerSettings()


def container(deployment_like: dict[str, Any]) -> dict[str, Any]:
    containers = deployment_like["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


def promql_selectors(expr: str) -> list[str]:
    """Metric names selected by a PromQL expression (Grafana variables filled in)."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
    ast = promql_parser.parse(expr)  # ValueError on a syntax error
    names: list[str] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name or next(
                (m.value for m in node.matchers.matchers if m.name == "__name__"), None)
            assert name, f"selector without a metric name in {expr!r}"
            names.append(name)
        return True

    promql_parser.walk(ast, visit)
    return names


def duration_seconds(text: str) -> float:
    """'30s', '1m30s', '10m', '1h' or a bare number of seconds."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+)(ms|h|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(int(n) * scale[u] for n, u in parts)


def dockerfile() -> DockerfileParser:
    return DockerfileParser(fileobj=io.BytesIO((DEPLOY / "Dockerfile").read_bytes()))


def final_stage() -> list[dict[str, Any]]:
    """The instructions after the last FROM."""
    structure: list[dict[str, Any]] = dockerfile().structure
    last = max(i for i, s in enumerate(structure) if s["instruction"] == "FROM")
    return structure[last:]


def instruction(stage: list[dict[str, Any]], name: str) -> str:
    values = [s["value"] for s in stage if s["instruction"] == name]
    assert values, f"no {name} in the final stage"
    value: str = values[-1]
    return value


def dockerfile_uid() -> int:
    user = instruction(final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit(), "numeric USER, so runAsNonRoot can check it"
    return int(uid)
