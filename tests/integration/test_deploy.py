"""The deployment files in deploy/ are valid and agree with the code and with each other.

Everything here runs offline, without Docker or a cluster:

- Kubernetes manifests are validated (strict: unknown fields fail) against the JSON schemas
  that the ``kubernetes-validate`` package bundles, for the oldest and newest Kubernetes
  version targeted; the KEDA resources against a small schema kept below, from KEDA's CRDs.
- PromQL in the Grafana dashboard and the alert rules is parsed (``promql-parser``) and may
  only name the worker's metrics; ``promtool`` (Debian package ``prometheus``) also runs
  the rules' unit tests where it is installed.
- The Dockerfile is parsed (``dockerfile-parse``) and its HEALTHCHECK command is run
  against a loopback HTTP server; the compose file's demo job runs against a test database.
- ``systemd-analyze`` and ``kubectl kustomize`` run where installed (skipped otherwise).
"""

from __future__ import annotations

import copy
import io
import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import psycopg
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from kubernetes_validate.utils import latest_version
from pydantic import AliasChoices

import outbox
from outbox import endpoints as ep
from outbox.delivery.settings import WorkerSettings
from outbox.signing import decode_secret
from outbox.ssrf import parse_networks

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
    "outbox_in_flight": "gauge",
    "outbox_claimed_per_poll": "histogram",
    "outbox_database_errors_total": "counter",
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


# ---------------------------------------------------------------------------------------
# Kubernetes


def test_kustomization_lists_every_manifest() -> None:
    kustomization = load_yaml_docs(K8S / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    present = sorted(p.name for p in K8S.glob("*.y*ml") if p.name != "kustomization.yaml")
    assert sorted(listed) == present
    assert "namespace" not in kustomization, "namespace-agnostic: the user picks it"
    assert {i["name"] for i in kustomization["images"]} == {"outbox"}


def test_manifests_are_namespace_agnostic_and_labelled() -> None:
    for doc in k8s_resources():
        assert "namespace" not in doc["metadata"], doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "outbox"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_manifests_match_the_kubernetes_schemas(version: str) -> None:
    checked = set()
    for doc in k8s_resources():
        if doc["apiVersion"].startswith("keda.sh/"):
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked.add(doc["kind"])
    assert checked == {"ConfigMap", "Secret", "Job", "Deployment", "PodDisruptionBudget",
                       "Service"}


@pytest.mark.parametrize(("path", "value"), [
    (("spec", "template", "spec", "terminationGracePeriod"), 30),  # misspelt field
    (("spec", "template", "spec", "terminationGracePeriodSeconds"), "30"),  # wrong type
    (("spec", "template", "spec", "containers"), [{"image": "outbox"}]),  # no name
])
def test_the_kubernetes_validator_rejects_broken_manifests(path: tuple[str, ...],
                                                           value: Any) -> None:
    broken = copy.deepcopy(k8s_one("Deployment"))
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


# KEDA's CRDs (keda.sh/v1alpha1), reduced to the fields these manifests may use; unknown
# fields fail, as kubectl's server-side validation would reject them.
_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
_METADATA = {"type": "object", "required": ["name"],
             "properties": {"name": _NAME, "labels": {"type": "object"},
                            "annotations": {"type": "object"}},
             "additionalProperties": False}
KEDA_SCHEMAS: dict[str, dict[str, Any]] = {
    "ScaledObject": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"},
            "kind": {"const": "ScaledObject"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["scaleTargetRef", "triggers"],
                "additionalProperties": False,
                "properties": {
                    "scaleTargetRef": {
                        "type": "object", "required": ["name"], "additionalProperties": False,
                        "properties": {"apiVersion": {"type": "string"},
                                       "kind": {"type": "string"}, "name": _NAME,
                                       "envSourceContainerName": {"type": "string"}}},
                    "pollingInterval": {"type": "integer", "minimum": 1},
                    "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                    "cooldownPeriod": {"type": "integer", "minimum": 0},
                    "idleReplicaCount": {"type": "integer", "minimum": 0},
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "fallback": {"type": "object"},
                    "advanced": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "restoreToOriginalReplicaCount": {"type": "boolean"},
                            "horizontalPodAutoscalerConfig": {
                                "type": "object", "additionalProperties": False,
                                "properties": {"name": {"type": "string"},
                                               "behavior": {"type": "object"}}},
                            "scalingModifiers": {"type": "object"}}},
                    "triggers": {
                        "type": "array", "minItems": 1,
                        "items": {
                            "type": "object", "required": ["type", "metadata"],
                            "additionalProperties": False,
                            "properties": {
                                "type": {"type": "string"},
                                "name": {"type": "string"},
                                "metadata": {"type": "object",
                                             "additionalProperties": {"type": "string"}},
                                "metricType": {"enum": ["AverageValue", "Value",
                                                        "Utilization"]},
                                "useCachedMetrics": {"type": "boolean"},
                                "authenticationRef": {
                                    "type": "object", "required": ["name"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "name": _NAME,
                                        "kind": {"enum": ["TriggerAuthentication",
                                                          "ClusterTriggerAuthentication"]}}},
                            }}},
                },
            },
        },
    },
    "TriggerAuthentication": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "keda.sh/v1alpha1"},
            "kind": {"const": "TriggerAuthentication"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": False,
                "properties": {
                    "secretTargetRef": {
                        "type": "array", "minItems": 1,
                        "items": {"type": "object", "required": ["parameter", "name", "key"],
                                  "additionalProperties": False,
                                  "properties": {"parameter": {"type": "string"},
                                                 "name": _NAME, "key": {"type": "string"}}}},
                    "env": {"type": "array"},
                    "configMapTargetRef": {"type": "array"},
                    "podIdentity": {"type": "object"},
                    "hashiCorpVault": {"type": "object"},
                },
            },
        },
    },
}


def keda_validate(doc: dict[str, Any]) -> None:
    schema = KEDA_SCHEMAS[doc["kind"]]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_keda_resources_match_the_keda_schema() -> None:
    keda = [d for d in k8s_resources() if d["apiVersion"].startswith("keda.sh/")]
    assert sorted(d["kind"] for d in keda) == ["ScaledObject", "TriggerAuthentication"]
    for doc in keda:
        keda_validate(doc)


def test_the_keda_schema_rejects_broken_resources() -> None:
    broken = copy.deepcopy(k8s_one("ScaledObject"))
    broken["spec"]["triggers"][0]["metadata"]["targetQueryValue"] = 500  # must be a string
    with pytest.raises(jsonschema.ValidationError):
        keda_validate(broken)
    broken = copy.deepcopy(k8s_one("ScaledObject"))
    broken["spec"]["minReplicas"] = 1  # an HPA field, not KEDA's
    with pytest.raises(jsonschema.ValidationError):
        keda_validate(broken)


def test_keda_scales_the_worker_deployment_on_the_due_backlog() -> None:
    scaled = k8s_one("ScaledObject")["spec"]
    deployment = k8s_one("Deployment")
    target = scaled["scaleTargetRef"]
    assert target["name"] == deployment["metadata"]["name"]
    assert target.get("kind", "Deployment") == "Deployment"
    assert 1 <= scaled["minReplicaCount"] < scaled["maxReplicaCount"]
    assert "replicas" not in deployment["spec"], "KEDA owns the replica count"
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "postgresql"
    assert trigger["metadata"]["query"] == BACKLOG_QUERY
    assert float(trigger["metadata"]["targetQueryValue"]) > 0
    assert float(trigger["metadata"].get("activationTargetQueryValue", "0")) >= 0
    # the query's schema is the one the workers use
    assert f"FROM {configmap_env()['OUTBOX_SCHEMA']}.deliveries " in BACKLOG_QUERY


def test_keda_reads_the_connection_string_from_the_workers_secret() -> None:
    scaled = k8s_one("ScaledObject")["spec"]
    auth = k8s_one("TriggerAuthentication")
    secret = k8s_named("Secret", env_sources("Deployment")["secretRef"])
    assert scaled["triggers"][0]["authenticationRef"]["name"] == auth["metadata"]["name"]
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["parameter"] == "connection"  # the postgresql scaler's full-URL parameter
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] == "OUTBOX_DATABASE_URL"
    assert ref["key"] in secret["stringData"]


def test_backlog_query_counts_due_deliveries_through_the_partial_index(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        ep.add(conn, "https://example.com/hooks", schema="outbox")
        with conn.transaction():
            for n in range(3):
                outbox.emit(conn, outbox.Event(type="t", payload=n), schema="outbox")
        ids = [r[0] for r in conn.execute("SELECT id FROM outbox.deliveries ORDER BY id")]
        assert len(ids) == 3
        conn.execute("UPDATE outbox.deliveries SET state = 'delivered' WHERE id = %s",
                     (ids[0],))
        conn.execute("UPDATE outbox.deliveries SET visible_at = now() + interval '1 minute'"
                     " WHERE id = %s", (ids[1],))  # leased, or a retry scheduled later
        assert conn.execute(BACKLOG_QUERY).fetchone() == (1,)
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + BACKLOG_QUERY))
    assert "deliveries_due" in plan, plan


def test_worker_deployment_probes_use_the_metrics_port() -> None:
    deployment = k8s_one("Deployment")
    worker = container(deployment)
    port = int(configmap_env()["OUTBOX_METRICS_PORT"])
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    assert ports == {"metrics": port}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = worker[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == port
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    assert annotations["prometheus.io/path"] == "/metrics"
    service = k8s_one("Service")
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] in ("metrics", port)


def test_termination_grace_exceeds_the_worker_shutdown_grace() -> None:
    pod = k8s_one("Deployment")["spec"]["template"]["spec"]
    grace = configured_grace(configmap_env())
    # the grace, then the final flush and the pool's close: keep a margin of 5 s at least
    assert pod["terminationGracePeriodSeconds"] >= grace + 5


def test_worker_and_job_read_the_configmap_and_their_secrets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    configmap = k8s_one("ConfigMap")["metadata"]["name"]
    worker, job = env_sources("Deployment"), env_sources("Job")
    assert worker["configMapRef"] == job["configMapRef"] == configmap
    # least privilege (migrations/roles.sql): workers never see the schema owner's URL
    assert worker["secretRef"] != job["secretRef"]
    for kind, sources in (("Deployment", worker), ("Job", job)):
        secret = k8s_named("Secret", sources["secretRef"])["stringData"]
        assert set(secret) == {"OUTBOX_DATABASE_URL"}, kind
        settings = check_settings({**configmap_env(), **secret}, monkeypatch)
        assert settings.schema_name == "outbox"
        assert settings.database_url == secret["OUTBOX_DATABASE_URL"]
    assert {s["metadata"]["name"] for s in k8s_resources() if s["kind"] == "Secret"} == {
        worker["secretRef"], job["secretRef"]}


def test_job_runs_the_migrations_with_bounded_retries() -> None:
    job = k8s_one("Job")
    spec = job["spec"]
    assert container(job)["args"] == ["migrate"]
    assert 0 < spec["backoffLimit"] <= 10
    assert spec["ttlSecondsAfterFinished"] > 0
    assert spec["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")
    assert container(job)["image"] == container(k8s_one("Deployment"))["image"] == "outbox"


@pytest.mark.parametrize("kind", ["Deployment", "Job"])
def test_pods_are_locked_down(kind: str) -> None:
    pod = k8s_one(kind)["spec"]["template"]["spec"]
    c = container(k8s_one(kind))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == dockerfile_uid()
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    for resource in ("cpu", "memory"):
        assert resource in c["resources"]["requests"]
        assert resource in c["resources"]["limits"]


def test_worker_gets_a_writable_tmp_on_a_read_only_root() -> None:
    deployment = k8s_one("Deployment")
    mounts = {m["mountPath"]: m["name"] for m in container(deployment)["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_pdb_and_service_select_the_worker_pods() -> None:
    deployment = k8s_one("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    pdb = k8s_one("PodDisruptionBudget")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert pdb.get("maxUnavailable", 0) >= 1 or pdb.get("minAvailable") == 0, \
        "with one replica a minAvailable PDB would block node drains"
    assert k8s_one("Service")["spec"]["selector"].items() <= labels.items()
    assert k8s_one("Job")["spec"]["template"]["metadata"]["labels"].items() >= {
        "app.kubernetes.io/name": "outbox"}.items()
    job_labels = k8s_one("Job")["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= job_labels.items(), "migrate pods must not count as workers"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kustomize_renders_the_same_resources_with_the_image_set() -> None:
    done = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, rendered)) == sorted(map(key, k8s_resources()))
    image = next(i for i in load_yaml_docs(K8S / "kustomization.yaml")[0]["images"])
    for doc in rendered:
        if doc["kind"] in ("Deployment", "Job"):
            assert container(doc)["image"] == f"{image['newName']}:{image['newTag']}"
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


# ---------------------------------------------------------------------------------------
# Dockerfile and .dockerignore


def dockerfile_uid() -> int:
    user = instruction(final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit(), "numeric USER, so runAsNonRoot can check it"
    return int(uid)


def test_dockerfile_bases_are_pinned_python_slim() -> None:
    parser = dockerfile()
    images = parser.parent_images
    assert len(images) >= 2, "multi-stage: build, then runtime"
    for image in images:
        name, _, tag = image.partition(":")
        assert name == "python" and "@" not in name
        assert re.fullmatch(r"3\.11\.\d+-slim-bookworm", tag), f"not an exact tag: {image}"
    assert len(set(images)) == 1, "same base in both stages (the venv is copied across)"


def test_dockerfile_builds_the_wheel_and_installs_the_worker_extra() -> None:
    structure = dockerfile().structure
    runs = " ".join(s["value"] for s in structure if s["instruction"] == "RUN")
    assert re.search(r"pip wheel (?=.*--no-deps)[^&]* \.(\s|$)", runs), runs
    assert "[worker]" in runs
    final = final_stage()
    assert any(s["instruction"] == "COPY" and "--from=" in s["value"] for s in final)
    assert not any(s["instruction"] in ("RUN",) and "pip install" in s["value"]
                   for s in final), "the runtime stage gets the venv, not pip"


def test_dockerfile_runtime_is_non_root_with_entrypoint_and_stop_signal() -> None:
    final = final_stage()
    assert dockerfile_uid() != 0
    assert json.loads(instruction(final, "ENTRYPOINT")) == ["outbox"]
    assert json.loads(instruction(final, "CMD")) == ["worker"]
    assert instruction(final, "STOPSIGNAL") == "SIGTERM"
    port = int(configmap_env()["OUTBOX_METRICS_PORT"])
    assert instruction(final, "EXPOSE").split() == [str(port)]
    assert f"OUTBOX_METRICS_PORT={port}" in instruction(final, "ENV")


def healthcheck_argv() -> list[str]:
    value = instruction(final_stage(), "HEALTHCHECK")
    options, cmd, exec_form = value.partition("CMD")
    assert cmd, value
    assert "--timeout=" in options and "--interval=" in options
    argv: list[str] = json.loads(exec_form)
    assert argv[:2] == ["python", "-c"], "no curl in slim images"
    return argv


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_dockerfile_healthcheck_asks_healthz(health_server: HTTPServer, status: int,
                                             healthy: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Health, "status", status)
    argv = healthcheck_argv()
    port = health_server.server_address[1]
    env = {**os.environ, "OUTBOX_METRICS_PORT": str(port)}
    done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True,
                          timeout=30)
    assert (done.returncode == 0) is healthy, done.stderr


def test_dockerfile_healthcheck_fails_when_nothing_listens(health_server: HTTPServer) -> None:
    port = health_server.server_address[1]
    health_server.shutdown()
    health_server.server_close()
    env = {**os.environ, "OUTBOX_METRICS_PORT": str(port)}
    done = subprocess.run([sys.executable, *healthcheck_argv()[1:]], env=env,
                          capture_output=True, timeout=30)
    assert done.returncode != 0


def _docker_pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated relative paths: ``*`` and
    ``?`` stop at ``/``, ``**`` crosses directories (Go's filepath.Match plus ``**``)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            j = pattern.index("]", i)
            out, i = out + pattern[i:j + 1], j + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str) -> bool:
    """Whether docker leaves ``path`` out of the build context: the last pattern matching
    the path or one of its parent directories wins; ``!`` lets it back in."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regex = _docker_pattern(pattern.removeprefix("!").strip().strip("/"))
        if any(regex.match(p) for p in prefixes):
            ignored = not negate
    return ignored


def copied_sources() -> list[str]:
    sources: list[str] = []
    for s in dockerfile().structure:
        if s["instruction"] == "COPY" and "--from=" not in s["value"]:
            sources.extend(p.rstrip("/") for p in s["value"].split()[:-1])
    return sources


def test_dockerfile_copies_every_package_the_wheel_needs() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool = project["tool"]["setuptools"]
    dirs = {tool.get("package-dir", {}).get(pkg, pkg.replace(".", "/"))
            for pkg in tool["packages"]}
    top = {d.split("/")[0] for d in dirs}
    needed = top | {"pyproject.toml", project["project"]["readme"]}
    assert needed <= set(copied_sources()), needed - set(copied_sources())


def test_dockerignore_lets_in_the_sources_and_keeps_out_the_rest() -> None:
    for source in copied_sources():
        assert not dockerignored(source), source
    for kept in ("outbox/__init__.py", "outbox/py.typed", "migrations/0001_initial.sql",
                 "delivery/worker.py"):
        assert not dockerignored(kept), kept
    for dropped in (".venv", ".venv/bin/python", ".git/config", "tests/conftest.py",
                    "bench/emit.py", "outbox/__pycache__/emit.cpython-311.pyc",
                    "outbox.egg-info/PKG-INFO", ".env"):
        assert dockerignored(dropped), dropped


# ---------------------------------------------------------------------------------------
# compose


def compose() -> dict[str, Any]:
    doc = load_yaml_docs(DEPLOY / "compose.yaml")
    assert len(doc) == 1
    return doc[0]


def compose_default(value: str) -> str:
    """``${VAR:-default}`` as compose resolves it with VAR unset; ``$$`` is a literal $."""
    value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)
    return value.replace("$$", "$")


def test_compose_has_the_demo_services() -> None:
    services = compose()["services"]
    assert set(services) == {"postgres", "migrate", "worker", "receiver", "emitter"}
    image = services["postgres"]["image"]
    assert re.fullmatch(r"postgres:\d+\.\d+-\w+", image), f"pin the exact version: {image}"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])


def test_compose_outbox_services_use_the_project_image() -> None:
    services = compose()["services"]
    for name in ("migrate", "worker", "receiver", "emitter"):
        build = services[name]["build"]
        assert (DEPLOY / build["context"]).resolve() == ROOT
        assert build["dockerfile"] == "deploy/Dockerfile"
        assert services[name]["image"] == services["worker"]["image"]


def test_compose_orders_migrate_before_workers() -> None:
    services = compose()["services"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("worker", "emitter"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"}
    worker = services["worker"]
    assert worker["deploy"]["replicas"] == 2
    assert worker["command"] == ["worker"]
    grace = configured_grace(worker["environment"])
    assert duration_seconds(worker["stop_grace_period"]) >= grace + 5


def test_compose_allowlist_lets_workers_reach_only_the_receiver(
        monkeypatch: pytest.MonkeyPatch) -> None:
    doc = compose()
    services = doc["services"]
    receiver = services["receiver"]
    address = ipaddress.ip_address(receiver["networks"]["hooks"]["ipv4_address"])
    subnet = ipaddress.ip_network(doc["networks"]["hooks"]["ipam"]["config"][0]["subnet"])
    assert address in subnet
    for name in ("worker", "emitter"):
        env = services[name]["environment"]
        allowed = parse_networks(env["OUTBOX_ALLOW_NETWORKS"])
        assert any(address in n for n in allowed), name
        assert sum(n.num_addresses for n in allowed) == 1, "only the receiver"
        assert "hooks" in services[name]["networks"]
    check_settings({k: compose_default(str(v))
                    for k, v in services["worker"]["environment"].items()}, monkeypatch)
    assert "hooks" not in services["postgres"]["networks"]


def test_compose_receiver_command_matches_its_cli() -> None:
    receiver = compose()["services"]["receiver"]
    assert receiver["entrypoint"] == ["python", "-m", "outbox.receiver"]
    argv = [compose_default(a) for a in receiver["command"]]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    done = subprocess.run([sys.executable, "-m", "outbox.receiver", "--help"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0
    for flag in (a for a in argv if a.startswith("--")):
        assert flag in done.stdout, flag
    decode_secret(argv[argv.index("--secret") + 1])  # a valid whsec_ secret


def emitter_script() -> str:
    command = compose()["services"]["emitter"]["command"]
    assert isinstance(command, list) and len(command) == 1
    return compose_default(command[0])


def test_compose_emitter_registers_the_receiver_with_its_secret() -> None:
    services = compose()["services"]
    script = emitter_script()
    receiver_argv = [compose_default(a) for a in services["receiver"]["command"]]
    port = receiver_argv[receiver_argv.index("--port") + 1]
    url = f"http://receiver:{port}/hooks"
    assert f"url={url}" in script
    secret = compose_default(services["emitter"]["environment"]["DEMO_SECRET"])
    assert secret == receiver_argv[receiver_argv.index("--secret") + 1]
    # the CLI options the script uses exist
    from outbox.cli import cli
    from outbox.cli import endpoints as _endpoints  # noqa: F401  (registers the group)

    group: Any = cli.commands["endpoints"]
    for sub, line in (("add", "outbox endpoints add"), ("list", "outbox endpoints list")):
        options = {o for p in group.commands[sub].params for o in p.opts}
        text = script.split(line, 1)[1].split("\n")[0]
        text += script.split(line, 1)[1].split("\n")[1] if text.endswith("\\") else ""
        used = set(re.findall(r"--[a-z-]+", text))
        assert used and used <= options, (sub, used - options)


def test_compose_emitter_python_emits_deliveries(db_url: str) -> None:
    script = emitter_script()
    python = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    with psycopg.connect(db_url, autocommit=True) as conn:
        ep.add(conn, "https://example.com/hooks", schema="outbox", event_types=["invoice.paid"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    done = subprocess.run([sys.executable, "-c", python], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**env, "OUTBOX_DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("emitted 5 events:")
    with psycopg.connect(db_url) as conn:
        row = conn.execute(BACKLOG_QUERY).fetchone()
    assert row == (5,)


# ---------------------------------------------------------------------------------------
# systemd


def unit_entries() -> list[tuple[str, str, str]]:
    entries: list[tuple[str, str, str]] = []
    section = ""
    for raw in (DEPLOY / "systemd" / "outbox-worker.service").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, raw
        entries.append((section, key.strip(), value.strip()))
    return entries


def unit_value(section: str, key: str) -> str:
    values = [v for s, k, v in unit_entries() if s == section and k == key]
    assert values, f"no {key}= in [{section}]"
    return values[-1]


def env_example() -> dict[str, str]:
    env: dict[str, str] = {}
    for raw in (DEPLOY / "systemd" / "outbox.env.example").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, raw
            env[key] = value
    return env


def test_systemd_unit_stops_after_the_worker_grace() -> None:
    grace = configured_grace(env_example())
    assert duration_seconds(unit_value("Service", "TimeoutStopSec")) >= grace + 5
    assert unit_value("Service", "KillSignal") == "SIGTERM"
    assert unit_value("Service", "KillMode") in ("mixed", "control-group")
    assert unit_value("Service", "Restart") == "always"


def test_systemd_unit_runs_the_worker_hardened() -> None:
    argv = shlex.split(unit_value("Service", "ExecStart"))
    assert Path(argv[0]).name == "outbox" and argv[1:] == ["worker"]
    assert unit_value("Service", "DynamicUser") == "yes"
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                       ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                       ("PrivateDevices", "yes"), ("CapabilityBoundingSet", "")):
        assert unit_value("Service", key) == value, key
    assert unit_value("Service", "EnvironmentFile") == "/etc/outbox/outbox.env"


def test_systemd_env_example_names_real_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = check_settings(env_example(), monkeypatch)
    assert settings.shutdown_grace_seconds == configured_grace(env_example())


def _analyzable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at a binary that exists here."""
    text = (DEPLOY / "systemd" / "outbox-worker.service").read_text()
    text, n = re.subn(r"(?m)^ExecStart=\S+", "ExecStart=/bin/true", text)
    assert n == 1
    unit = tmp_path / "outbox-worker.service"
    unit.write_text(text)
    return unit


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    done = subprocess.run(["systemd-analyze", "verify", "--man=no",
                           str(_analyzable_unit(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_security_exposure_is_low(tmp_path: Path) -> None:
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                           str(_analyzable_unit(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    if match is None:
        pytest.skip(f"this systemd-analyze cannot assess offline: {done.stderr.strip()}")
    assert float(match.group(1)) <= 2.0, done.stdout


# ---------------------------------------------------------------------------------------
# Grafana and Prometheus


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
    assert set(rules) == {"OutboxDeliveriesPilingUp", "OutboxEndpointFailing"}
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


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_checks_and_unit_tests_the_alerts() -> None:
    prom = DEPLOY / "prometheus"
    for argv in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]):
        done = subprocess.run(["promtool", *argv], cwd=prom, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
