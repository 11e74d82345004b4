"""The container files say what the book relies on (no Docker engine is needed to read them)."""

import re
from pathlib import Path

import pytest
import yaml
from packaging.markers import Marker

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"


@pytest.fixture(scope="module")
def service():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert list(compose["services"]) == ["triton"], "one service, named triton"
    return compose["services"]["triton"]


@pytest.fixture(scope="module")
def dockerfile():
    return (DOCKER / "Dockerfile").read_text()


def pins(text, python="3.12"):
    """name -> version for every `name==version` line that applies to the image's Python."""
    found = {}
    for line in text.splitlines():
        requirement, _, marker = line.partition(";")
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s\\]+)", requirement)
        if m and (not marker.strip() or Marker(marker).evaluate({"python_version": python})):
            found[m.group(1).lower()] = m.group(2)
    return found


def test_one_pinned_tag(service, dockerfile):
    tag = service["build"]["args"]["TRITON_TAG"]
    assert re.fullmatch(r"\d\d\.\d\d", tag), f"TRITON_TAG {tag!r} is not a YY.MM release"
    assert re.search(r"^ARG TRITON_TAG$", dockerfile, re.MULTILINE), "the Dockerfile's ARG must have no default"
    assert "FROM nvcr.io/nvidia/tritonserver:${TRITON_TAG}-py3" in dockerfile
    # The tag appears in prose only where the reader is told to pull it, and in the image name.
    image_name, image_tag = service["image"].rsplit(":", 1)
    assert image_tag == tag, f"image {service['image']} is not tagged with TRITON_TAG {tag}"
    assert f"docker pull nvcr.io/nvidia/tritonserver:{tag}-py3" in (DOCKER / "compose.yaml").read_text()


def test_ports_are_published_on_the_loopback_only(service):
    published = {}
    for entry in service["ports"]:
        host, host_port, container_port = str(entry).split(":")
        assert host == "127.0.0.1", f"{entry} is reachable from other machines"
        published[int(container_port)] = int(host_port)
    assert published == {8000: 8000, 8001: 8001, 8002: 8002}


def test_the_gpu_is_reserved(service):
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices), devices


def test_shared_memory_is_large_enough(service):
    number, unit = re.fullmatch(r"(\d+)([kmg]?)b?", str(service["shm_size"]).lower()).groups()
    size = int(number) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit]
    assert size >= 256 * 2**20, f"shm_size {service['shm_size']}: the python backend needs room for images"


def test_the_model_repository_is_mounted_where_the_server_reads_it(service):
    assert "../model_repository:/models:ro" in service["volumes"]
    assert "--model-repository=/models" in service["command"]
    assert "--model-control-mode=explicit" in service["command"]
    assert (DOCKER / "../model_repository").resolve() == ROOT / "model_repository"


def test_the_package_is_installed_not_found_through_pythonpath(service, dockerfile):
    # The python backend's stub ignores PYTHONPATH: python models find tritonbook only installed.
    assert "PYTHONPATH" not in str(service.get("environment", {}))
    assert "COPY tritonbook " in dockerfile and "COPY pyproject.toml " in dockerfile
    assert re.search(r"pip install [^\n]*--no-deps /opt/tritonbook", dockerfile)
    context = (DOCKER / service["build"]["context"]).resolve()
    assert context == ROOT and (context / service["build"]["dockerfile"]).resolve() == DOCKER / "Dockerfile"
    assert (context / "pyproject.toml").is_file()


def test_the_build_context_is_only_the_package():
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1:][:2] == ["!pyproject.toml", "!tritonbook/"], ignore


def test_the_image_pins_equal_requirements(dockerfile):
    image = pins(dockerfile.replace("\\\n", "\n"))
    wanted = pins((ROOT / "requirements.txt").read_text())
    wanted["opencv-python-headless"] = wanted["opencv-python"]  # the headless build, same version
    assert image, "no pinned packages found in the Dockerfile"
    for name, version in image.items():
        assert wanted.get(name) == version, f"{name}=={version} in the Dockerfile, {wanted.get(name)} in requirements.txt"
