"""Shared fixtures: real embedded Triton servers, and small model repositories for them."""

from __future__ import annotations

import os
import textwrap
import warnings
from pathlib import Path

import pytest

from tritonbook import repository, server


# The conformance suite alone may be pointed at another server (the NGC container):
# TRITON_URL as it was when pytest started.
CONFORMANCE_URL = os.environ.get("TRITON_URL", "").strip() or None

# The profile the notebooks ran under before these tests (CI: quick). The model files
# they built are reused here, not rebuilt under another profile (book_server).
NOTEBOOK_PROFILE = os.environ.get("TRITONBOOK_PROFILE")


def pytest_configure(config):
    # The tests start their own embedded servers; a TRITON_URL meant for the
    # notebooks must not redirect them.
    for name in ("TRITON_URL", "TRITON_GRPC_URL", "TRITON_METRICS_URL"):
        os.environ.pop(name, None)
    # The unit tests hold the measuring code to the parameters they give it: CI's quick
    # profile (TRITONBOOK_PROFILE, for the notebooks) must not change them. A test of
    # the quick profile sets it itself.
    os.environ["TRITONBOOK_PROFILE"] = "full"


def wait_until_ready(triton, timeout: float = 10.0) -> None:
    """Until the whole server reports ready. A module before this one on the shared
    server may have just unloaded models: with strict readiness the server is not ready
    until each has finalised, about a second for a python-backend model
    (book/troubleshooting.md, "not ready for a moment after an unload")."""
    import time

    deadline = time.monotonic() + timeout
    while not triton.is_ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"the server was not ready within {timeout:g} s")
        time.sleep(0.05)


def logged(triton, text: str, timeout: float = 10.0) -> bool:
    """Whether ``text`` reaches the server log within ``timeout`` seconds. A python
    model's own log lines pass through its stub's message queue and are written by a
    thread of the server: under load they land a moment after the call that made
    them returns (a CI run read the log before one had arrived)."""
    import time

    deadline = time.monotonic() + timeout
    while text not in triton.log():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="session")
def book_server():
    """One embedded server on the book's model repository, its generated files built.

    Built under the notebooks' profile: these tests need files that load and answer,
    and CI's notebook pass has just built them (an AOTInductor package compiled under
    the full profile's settings would cost CI a second compile of over a minute)."""
    forced = os.environ["TRITONBOOK_PROFILE"]
    if NOTEBOOK_PROFILE is not None:
        os.environ["TRITONBOOK_PROFILE"] = NOTEBOOK_PROFILE
    try:
        repository.ensure_model_files()
    finally:
        os.environ["TRITONBOOK_PROFILE"] = forced
    with server.EmbeddedTriton(repository.REPOSITORY) as triton:
        yield triton


@pytest.fixture(scope="session")
def scratch_repository(tmp_path_factory) -> Path:
    """An empty model repository; tests add model folders to it."""
    return tmp_path_factory.mktemp("repository")


@pytest.fixture(scope="session")
def scratch_server(scratch_repository):
    """An embedded server on the scratch repository (models are loaded by name)."""
    with server.EmbeddedTriton(scratch_repository) as triton:
        yield triton


def write_model(repository_dir: Path, name: str, config: str, files: dict[str, object] | None = None) -> Path:
    """A model folder: config.pbtxt, plus files (bytes, text, or a builder taking a path)."""
    folder = repository_dir / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(config))
    for relative, content in (files or {}).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))
    return folder


def save_torchscript(module) -> callable:
    """A builder that scripts ``module`` and saves it where write_model says."""
    import torch

    def build(path: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(torch.jit.script(module), str(path))

    return build


# A model whose service time is known: each execution sleeps PACE_MS, whatever it
# carries, on one serial instance, so it can answer at most 1000 / PACE_MS executions
# a second. The load tests hold the book's measurements to that.
PACE_MS = 20
PACED_CONFIG = f"""
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT__0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
parameters {{ key: "PACE_MS", value: {{ string_value: "{PACE_MS}" }} }}
"""
PACED_MODEL = """
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.pace = float(parameters["PACE_MS"]["string_value"]) / 1e3

    def execute(self, requests):
        time.sleep(self.pace)  # one execution, however many requests it carries
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT__0").as_numpy()
            output = pb_utils.Tensor("OUTPUT__0", x)
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""


@pytest.fixture(scope="session")
def paced_server(scratch_repository, scratch_server):
    """The scratch server with ``paced`` loaded (PACE_MS per execution, one instance)."""
    write_model(scratch_repository, "paced", PACED_CONFIG, {"1/model.py": PACED_MODEL})
    scratch_server.load("paced")
    yield scratch_server
    scratch_server.unload("paced")
