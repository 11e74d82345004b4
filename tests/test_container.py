"""The container files say what the book relies on. No Docker engine is needed: the tests
read docker/compose.yaml (YAML), docker/Dockerfile (line by line) and
docker/Dockerfile.dockerignore (with Docker's matching rules)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from packaging.markers import Marker

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
# BuildKit reads <Dockerfile>.dockerignore beside the Dockerfile before <context>/.dockerignore.
IGNORE = DOCKER / "Dockerfile.dockerignore"
# Where the reader is told how to get the base image.
PROSE = [COMPOSE, ROOT / "README.md", ROOT / "book" / "setup.md"]
PORTS = (8000, 8001, 8002)  # HTTP, gRPC, metrics


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def service(compose):
    services = list(compose.get("services") or {})
    assert services == ["triton"], f"compose.yaml should define one service, triton; it has {services}"
    return compose["services"]["triton"]


@pytest.fixture(scope="module")
def tag(service):
    args = (service.get("build") or {}).get("args") or {}
    assert "TRITON_TAG" in args, "compose.yaml must pass the build argument TRITON_TAG"
    value = args["TRITON_TAG"]
    assert isinstance(value, str), (
        f"TRITON_TAG is {value!r} ({type(value).__name__}); quote it: YAML reads 26.10 as the number 26.1")
    assert re.fullmatch(r"\d\d\.(0[1-9]|1[0-2])", value), f"TRITON_TAG {value!r} is not a YY.MM release"
    return value


@pytest.fixture(scope="module")
def instructions():
    """The Dockerfile as (KEYWORD, arguments) pairs: continuations joined, comments dropped."""
    found, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        found.append((keyword.upper(), " ".join(arguments.split())))
        pending = ""
    assert not pending, f"the Dockerfile ends inside a continued line: {pending!r}"
    return found


def command_of(service) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def volumes_of(service) -> list[tuple[str, str, bool]]:
    """(source, target, read-only) for every volume, short or long syntax."""
    found = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            found.append((str(entry.get("source")), str(entry.get("target")), bool(entry.get("read_only"))))
        else:
            source, target, *options = str(entry).split(":")
            found.append((source, target, "ro" in ",".join(options).split(",")))
    return found


def pip_installs(instructions) -> list[list[str]]:
    """The arguments after `pip install` in each RUN, up to the end of that shell command."""
    found = []
    for keyword, arguments in instructions:
        if keyword == "RUN":
            for m in re.finditer(r"pip install ([^&;|]*)", arguments):
                found.append(m.group(1).split())
    return found


def pins(text: str, python: str = "3.12") -> dict[str, str]:
    """name -> version for each `name==version` that applies to the given Python."""
    found = {}
    for line in text.splitlines():
        requirement, _, marker = line.partition(";")
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s\\]+)", requirement)
        if m and (not marker.strip() or Marker(marker).evaluate({"python_version": python})):
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found


def scalars(node, path=()):
    """(path, value) for every scalar in a parsed YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from scalars(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from scalars(value, (*path, str(index)))
    else:
        yield path, node


def dockerignore_regex(pattern: str) -> re.Pattern:
    """One .dockerignore pattern as a regex over /-separated paths (Go's filepath.Match
    plus Docker's `**`, which spans any number of folders, none included)."""
    pattern = pattern.strip().strip("/")
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
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def in_build_context(path: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its folders decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for negated, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negated
    return not excluded


# --- one pinned tag --------------------------------------------------------------------


def test_the_tag_is_pinned_once(compose, tag, instructions):
    args = [a for k, a in instructions if k == "ARG" and a.split("=")[0] == "TRITON_TAG"]
    assert args == ["TRITON_TAG"], f"the Dockerfile must declare ARG TRITON_TAG once, with no default; it has {args}"
    arg_at = next(i for i, (k, a) in enumerate(instructions) if k == "ARG" and a == "TRITON_TAG")
    from_at = next((i for i, (k, _) in enumerate(instructions) if k == "FROM"), -1)
    assert arg_at < from_at, "ARG TRITON_TAG must come before FROM, or FROM cannot use it"
    froms = [a for k, a in instructions if k == "FROM"]
    assert froms == ["nvcr.io/nvidia/tritonserver:${TRITON_TAG}-py3"], f"FROM must name the NGC image by TRITON_TAG: {froms}"
    literal = [a for _, a in instructions if tag in a or re.search(r"tritonserver:\d", a)]
    assert not literal, f"the Dockerfile writes a tag itself instead of using TRITON_TAG: {literal}"
    holders = sorted(".".join(path) for path, value in scalars(compose) if tag in str(value))
    assert holders == ["services.triton.build.args.TRITON_TAG", "services.triton.image"], (
        f"the tag {tag} should be set in build.args.TRITON_TAG and repeated only in the image name; found in {holders}")


def test_the_image_is_named_after_the_tag(service, tag):
    assert "image" in service, "the service needs an image: name, so that the built image is not anonymous"
    name, sep, image_tag = str(service["image"]).rpartition(":")
    assert sep and name and "/" not in image_tag, f"image {service['image']!r} has no tag"
    assert image_tag == tag, f"image {service['image']} is not tagged with TRITON_TAG {tag}"
    assert service.get("pull_policy") == "build", (
        "pull_policy must be build: the image name is local, and `up` must not keep an image with an old tritonbook")


def test_the_reader_is_told_to_pull_the_pinned_base_image(tag):
    line = f"docker pull nvcr.io/nvidia/tritonserver:{tag}-py3"
    for path in PROSE:
        text = path.read_text()
        assert line in text, f"{path.relative_to(ROOT)} must tell the reader to run `{line}` the day before"
        named = set(re.findall(r"tritonserver:(\d\d\.\d\d)-py3", text))
        assert named == {tag}, f"{path.relative_to(ROOT)} names tritonserver tags {sorted(named)}; compose pins {tag}"


# --- what the running container needs --------------------------------------------------


def test_ports_are_published_on_the_loopback_only(service):
    published = {}
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            host, host_port, target = entry.get("host_ip"), entry.get("published"), entry.get("target")
        else:
            parts = str(entry).split(":")
            assert len(parts) == 3, f"port {entry!r}: write HOST_IP:HOST_PORT:CONTAINER_PORT, with 127.0.0.1"
            host, host_port, target = parts
        assert host == "127.0.0.1", f"port {entry!r} is reachable from other machines: bind it to 127.0.0.1"
        published[int(str(target).split("/")[0])] = int(host_port)
    for port in PORTS:
        assert published.get(port) == port, f"container port {port} must be published as 127.0.0.1:{port}; got {published}"


def test_the_gpu_is_reserved(service):
    devices = (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    assert any(d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or []) for d in devices), (
        f"deploy.resources.reservations.devices must reserve an nvidia device with capability gpu: {devices}")


def test_shared_memory_is_large_enough(service):
    value = str(service.get("shm_size", "")).strip().lower()
    m = re.fullmatch(r"(\d+)\s*([kmg]?)b?", value)
    assert m, f"shm_size {value!r} is missing or not a size such as 1g or 512m"
    size = int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2)]
    assert size >= 256 * 2**20, f"shm_size {value}: the python backend passes images through /dev/shm; give it 256m or more"


def test_the_model_repository_is_mounted_where_the_server_reads_it(service):
    volumes = volumes_of(service)
    mounts = [v for v in volumes if v[0] == "../model_repository"]
    assert mounts == [("../model_repository", "/models", True)], (
        f"mount ../model_repository read-only at /models (../model_repository:/models:ro); volumes are {volumes}")
    assert (DOCKER / "../model_repository").resolve() == ROOT / "model_repository", "the mount must name the book's folder"
    repositories = [c.split("=", 1)[1] for c in command_of(service) if c.startswith("--model-repository=")]
    assert repositories == [mounts[0][1]], (
        f"--model-repository must be the mount target {mounts[0][1]}; the command gives {repositories}")


def test_models_load_only_on_request(service):
    command = command_of(service)
    assert "--model-control-mode=explicit" in command, f"the command must use explicit model control: {command}"


def test_python_models_do_not_rely_on_pythonpath(service, instructions):
    # One copy of tritonbook, installed at build time, for the server and its models.
    # Whether the stub reads PYTHONPATH depends on the release (book/versions.md: 24.10 on
    # Python 3.11+ ignores it, 26.08 reads it), so the book does not rely on it.
    rule = "install tritonbook in the image instead (book/versions.md)"
    assert "PYTHONPATH" not in str(service.get("environment") or {}), f"compose sets PYTHONPATH: {rule}"
    env = [a for k, a in instructions if k == "ENV" and "PYTHONPATH" in a]
    assert not env, f"the Dockerfile sets PYTHONPATH ({env}): {rule}"
    for source, target, _ in volumes_of(service):
        resolved = (DOCKER / source).resolve()
        assert resolved not in (ROOT, ROOT / "tritonbook"), (
            f"volume {source}:{target} mounts the source tree; install tritonbook in the image instead")
        assert target != "/workspace", f"volume {source}:{target}: nothing in the container uses /workspace"


# --- the image ---------------------------------------------------------------------------


def test_the_build_context_is_the_project_root(service):
    build = service.get("build") or {}
    assert isinstance(build, dict) and "context" in build, "build must be a mapping with context and dockerfile"
    context = (DOCKER / build["context"]).resolve()
    assert context == ROOT, f"build.context {build['context']!r} is {context}, not the project root {ROOT}"
    dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
    assert dockerfile == DOCKERFILE, f"build.dockerfile names {dockerfile}, not {DOCKERFILE}"
    assert (context / "pyproject.toml").is_file(), "the build context has no pyproject.toml to install"
    assert IGNORE.is_file(), f"{IGNORE.relative_to(ROOT)} is missing: the whole project would be sent to the builder"


def test_the_dockerfile_installs_the_package(instructions):
    copies = {}
    for index, (keyword, arguments) in enumerate(instructions):
        if keyword == "COPY":
            *sources, destination = arguments.split()
            for source in sources:
                copies[source.rstrip("/")] = (destination, index)
    assert "pyproject.toml" in copies and "tritonbook" in copies, (
        f"the Dockerfile must COPY pyproject.toml and tritonbook; it copies {sorted(copies)}")
    folder = copies["pyproject.toml"][0].rstrip("/")
    assert copies["tritonbook"][0].rstrip("/") == f"{folder}/tritonbook", (
        f"tritonbook must be copied into {folder}/tritonbook, beside pyproject.toml")
    installs = [args for args in pip_installs(instructions) if folder in (a.rstrip("/") for a in args)]
    assert installs, f"no `pip install {folder}` in the Dockerfile"
    flags = installs[0]
    assert "--no-deps" in flags, "install tritonbook with --no-deps: its dependencies are the pinned packages"
    assert "--break-system-packages" in flags, "the image's Python is externally managed: pip needs --break-system-packages"
    assert not {"-e", "--editable"} & set(flags), "install tritonbook from its copy, not editable"
    run_index = next(i for i, (k, a) in enumerate(instructions) if k == "RUN" and f"{folder}" in a and "pip install" in a)
    assert max(copies["pyproject.toml"][1], copies["tritonbook"][1]) < run_index, "COPY the package before installing it"


def test_the_build_context_holds_only_the_package():
    rules = []
    for line in IGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), dockerignore_regex(line.lstrip("!"))))
    package = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tritonbook").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]
    for path in ["pyproject.toml", *package]:
        assert in_build_context(path, rules), f"{path} is left out of the build context, but the image needs it"
    for path in [".venv/bin/python", ".git/HEAD", "_build/html/index.html", "tritonbook.egg-info/PKG-INFO",
                 "model_repository/gfpgan/1/model.pt", "model_repository/srcnn/1/model.onnx",
                 "assets/GFPGANv1.pth", "notebooks/06_pipelines.ipynb", "weights.pt",
                 "tritonbook/__pycache__/server.cpython-312.pyc", "tritonbook/standins/__pycache__/common.cpython-312.pyc",
                 "tritonbook/model.pt", "tritonbook/csrc/model.onnx", "tritonbook/GFPGANv1.pth"]:
        assert not in_build_context(path, rules), f"{path} is sent to the builder; {IGNORE.name} should leave it out"


def test_the_image_pins_equal_requirements(instructions):
    installs = [a for args in pip_installs(instructions) for a in args
                if not a.startswith("-") and not a.startswith("/") and not a.startswith(".")]
    unpinned = [a for a in installs if "==" not in a]
    assert not unpinned, f"the Dockerfile installs packages without an exact pin: {unpinned}"
    image = pins("\n".join(installs))
    assert "torch" in image, f"no pinned torch found in the Dockerfile: {image}"
    wanted = pins((ROOT / "requirements.txt").read_text())
    # The image takes the headless build of OpenCV, at the version of requirements.txt.
    if "opencv-python" in wanted:
        wanted.setdefault("opencv-python-headless", wanted["opencv-python"])
    for name, version in image.items():
        assert name in wanted, f"{name} is pinned in the Dockerfile but not in requirements.txt"
        assert wanted[name] == version, f"{name}=={version} in the Dockerfile, {name}=={wanted[name]} in requirements.txt"


def test_the_backend_libtorch_version_is_read_from_the_library(tmp_path):
    # The way book/setup.md tells a reader to read the container's libtorch version, tried
    # on the libtorch of this environment (the wheel's libtorch_cpu.so).
    import torch

    from tritonbook.libtorch_version import libtorch_version

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    assert libtorch_version(library) == torch.__version__.split("+")[0]
    empty = tmp_path / "libtorch_cpu.so"
    empty.write_bytes(b"\x00pytorch\x00no version here\x00")
    with pytest.raises(ValueError, match="found none"):
        libtorch_version(empty)
