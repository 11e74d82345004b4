"""deploy/kubernetes/ holds manifests Kubernetes would accept, for the book's container.

No cluster here: each document is checked against the Kubernetes API's own schemas
(kubernetes-validate, strict: an unknown field is an error), then for what the book
relies on: the compose image under a registry, model control "none", probes on Triton's
health endpoints, shared memory for the python backend, a read-only volume several
nodes can mount, and Services that reach the pods. The models the manifest serves are
exported as its comment tells the reader, and served by a real (embedded) Triton with
model control "none": every one loads, and one broken folder stops the server.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import write_model
from tritonbook import images, repository, server
from tritonbook.client import infer

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
    kinds = {doc["kind"] for doc in documents()}
    assert MANIFESTS and kinds == {"Deployment", "Service", "PersistentVolumeClaim"}


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
    registry, _, name = container["image"].rpartition("/")
    assert registry and name == compose["services"]["triton"]["image"]
    assert "--model-control-mode=none" in container["args"]
    # Ready only when the models are; liveness watches readiness too, since a dead
    # python stub leaves 26.08 live but not ready.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/v2/health/ready"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and "/dev/shm" in mounts
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    claim = volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"]
    [volume] = [c for c in by_kind["PersistentVolumeClaim"] if c["metadata"]["name"] == claim]
    assert volume["spec"]["accessModes"] == ["ReadOnlyMany"]


def test_the_services_reach_the_pods_on_triton_ports(by_kind):
    [deployment] = by_kind["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named == {"http": 8000, "grpc": 8001, "metrics": 8002}
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind["Service"]}
    for spec in services.values():
        assert spec["selector"].items() <= labels.items()
        assert all(named[p["targetPort"]] == p["port"] for p in spec["ports"])
    # One balanced address, and one headless name for clients that balance requests.
    assert {p["name"] for p in services["tritonbook"]["ports"]} == set(named)
    assert services["tritonbook-pods"]["clusterIP"] == "None"


def served_models(by_kind) -> list[str]:
    [deployment] = by_kind["Deployment"]
    return deployment["metadata"]["annotations"]["tritonbook/models"].split()


def test_the_comment_fills_the_volume_with_the_annotated_models(by_kind):
    text = MANIFESTS[0].read_text()
    command = " ".join(line.strip("# \\") for line in text.splitlines() if line.startswith("#"))
    assert "python -m tritonbook.repository export /mnt/volume " + " ".join(served_models(by_kind)) in command


@pytest.fixture(scope="module")
def exported(by_kind, tmp_path_factory):
    volume = tmp_path_factory.mktemp("volume")
    return volume, repository.export(served_models(by_kind), volume)


def test_the_exported_volume_holds_files_not_links(exported):
    volume, models = exported
    assert sorted(p.name for p in volume.iterdir()) == sorted(models)
    assert not [p for p in volume.rglob("*") if p.is_symlink()]
    assert (volume / "gfpgan" / "1" / "model.pt").stat().st_size > 1_000_000


def test_model_control_none_serves_exactly_the_exported_models(exported):
    volume, models = exported
    with server.EmbeddedTriton(volume, model_control="none", startup_timeout=300) as triton:
        index = triton.http().get_model_repository_index()
        assert {m["name"]: m["state"] for m in index} == {m: "READY" for m in models}
        # The pipeline answers: one face found and restored.
        picture = images.load_face(256)  # one portrait
        # Both outputs: BOXES alone meets the ensemble deadlock of troubleshooting.md.
        outputs = ["RESTORED", "BOXES"]
        got = infer(triton, "face_restore_ensemble", {"PIXELS": picture}, outputs, "grpc")
        assert got["BOXES"].shape == (1, 4) and got["RESTORED"].shape == picture.shape


def test_one_broken_folder_stops_a_model_control_none_server(exported, tmp_path):
    # --exit-on-error defaults to true: under Kubernetes, a crash loop.
    volume, _ = exported
    for model in ("face_detect", "face_paste"):  # small: no network file to copy
        (tmp_path / model).symlink_to(volume / model)
    write_model(tmp_path, "broken", 'backend: "python"\nmax_batch_size: "eight"\n')
    with pytest.raises(server.TritonServerError, match="exited with code|failed to start") as caught:
        server.EmbeddedTriton(tmp_path, model_control="none", startup_timeout=120)
    assert "broken" in str(caught.value)


def test_export_refuses_an_ensemble_without_its_steps(tmp_path):
    with pytest.raises(ValueError, match="face_detect"):
        repository.export(["face_restore_ensemble", "gfpgan"], tmp_path / "volume")
    with pytest.raises(ValueError, match="unknown"):
        repository.export(["no_such_model"], tmp_path / "volume")
    assert not (tmp_path / "volume").exists()
