"""deploy/kubernetes: manifests valid against the Kubernetes and KEDA schemas (strict: unknown
fields fail), for the oldest and newest Kubernetes version targeted, and consistent with the
worker's settings, probes and backlog query. ``kubectl kustomize`` runs where installed."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from typing import Any

import jsonschema
import kubernetes_validate
import psycopg
import pytest
import yaml

import outbox
from outbox.admin import endpoints as ep
from tests.deploy.files import (
    BACKLOG_QUERY,
    K8S,
    K8S_VERSIONS,
    check_settings,
    configmap_env,
    configured_grace,
    container,
    dockerfile_uid,
    env_sources,
    k8s_named,
    k8s_one,
    k8s_resources,
    load_yaml_docs,
)


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
    # deliveries is partitioned (migrations/0018): each partition's copy of the index
    assert re.search(r"deliveries(_p\d+|_legacy)?_due\b", plan), plan


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
