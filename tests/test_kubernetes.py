"""deploy/kubernetes/ holds manifests Kubernetes would accept, for the book's container.

No cluster here: each document is checked against the Kubernetes API's own schemas
(kubernetes-validate, strict: an unknown field is an error), then for what the book
relies on: the compose image, model control "none", probes on Triton's health
endpoints, shared memory for the python backend, and a Service that reaches the pods.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.33"  # a release every maintained distribution has reached


def documents():
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def by_kind():
    found = {}
    for doc in documents():
        found.setdefault(doc["kind"], []).append(doc)
    return found


def test_there_are_manifests():
    assert MANIFESTS and {doc["kind"] for doc in documents()} == {"Deployment", "Service"}


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_each_document_passes_the_kubernetes_schema(doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_can_fail():
    broken = next(doc for doc in documents() if doc["kind"] == "Deployment")
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_deployment_runs_the_book_container_safely(by_kind):
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    [deployment] = by_kind["Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == compose["services"]["triton"]["image"]
    assert "--model-control-mode=none" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and "/dev/shm" in mounts
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"


def test_the_service_reaches_the_pods_on_triton_ports(by_kind):
    [deployment], [service] = by_kind["Deployment"], by_kind["Service"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {p["targetPort"]: p["port"] for p in service["spec"]["ports"]} == {
        "http": 8000, "grpc": 8001, "metrics": 8002}
    assert named == {"http": 8000, "grpc": 8001, "metrics": 8002}
