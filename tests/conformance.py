"""The backends' contract as cases: a model file, a config, and the real backend's answer.

Each case is re-created in the book's own words from Triton's qa tests or a backend's
source, which it names. A case uploads its model through the load API (config and files
in the request), so the same cases run against any server: the embedded one with the
stand-ins (``make test``), or the NGC container (``TRITON_URL=127.0.0.1:8000 pytest
tests/test_conformance.py``).

Two differences the suite allows, each because a python backend cannot avoid it:

* a failed load on a stand-in is reported with status "Internal" (the python backend
  reports every initialize() failure so); the real backends say "Invalid argument" where
  a config disagrees with the model (most of this suite's load errors) and "Internal"
  where the file itself cannot be loaded. The message itself must be the real backend's.
* a case may name ``standin_load_error``: a feature the stand-in does not serve (sequence
  batching). On the embedded server its load must fail with that message, which names the
  stand-in; against the container the real answer is checked as usual.
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tritonbook.client import infer, load_failure
from tritonbook.server import TritonServerError

FILE_NAMES = {"pytorch_libtorch": "model.pt", "onnxruntime_onnx": "model.onnx", "torch_aoti": "model.pt2"}


@dataclass
class Case:
    name: str  # also the model's name on the server
    source: str  # where the real backend's answer comes from: a qa test or file:line
    model: Callable[[], bytes]  # the model file's bytes
    config: dict
    # What the real backend answers. Exactly one of load_error / infer_* applies.
    load_error: str | None = None  # part of the backend's message
    load_status: str = "Invalid argument"  # the real backend's error code for it
    served: dict = field(default_factory=dict)  # parts of the served config
    served_io: dict[str, dict[str, tuple]] | None = None  # input/output: name -> (type, dims)
    inputs: dict[str, np.ndarray] | None = None
    expected: dict[str, np.ndarray] | None = None  # outputs
    infer_error: tuple[int, str] | None = None  # HTTP status, part of the message
    log: list[str] = field(default_factory=list)  # lines the embedded server's log must hold
    standin_load_error: str | None = None  # the stand-in refuses this at load, in these words

    @property
    def platform(self) -> str:
        return self.config["platform"]

    def __str__(self) -> str:
        return self.name


def run(triton, case: Case, model_bytes: bytes) -> None:
    """Load the case's model with its config and files; check the server's answers."""
    files = {f"file:1/{FILE_NAMES[case.platform]}": model_bytes}
    config = dict(case.config, name=case.name)
    if triton.is_embedded() and case.standin_load_error is not None:
        _check_standin_refusal(triton, case, config, files)
        return
    try:
        triton.load(case.name, config=config, files=files)
    except TritonServerError as exc:
        _check_load_failure(triton, case, exc)
        return
    try:
        assert case.load_error is None, f"{case.name} loaded; the real backend refuses it: {case.load_error}"
        served = triton.http().get_model_config(case.name)
        for key, value in case.served.items():
            assert _subset(value, served.get(key)), f"served {key} = {served.get(key)!r}, expected {value!r}"
        for kind, tensors in (case.served_io or {}).items():
            # In any order: the real backend fills them from a hash map.
            got = {t["name"]: (t["data_type"], [int(d) for d in t["dims"]]) for t in served[kind]}
            assert got == {n: (t, list(d)) for n, (t, d) in tensors.items()}, f"served {kind}: {got}"
        if case.inputs is not None:
            _check_inference(triton, case)
        if triton.is_embedded():
            log = triton_log(triton)
            for line in case.log:
                assert line in log, f"server log lacks {line!r}"
    finally:
        triton.unload(case.name)


def _check_load_failure(triton, case: Case, exc: TritonServerError) -> None:
    failure = load_failure(exc)
    assert case.load_error is not None, f"{case.name} did not load: {exc.reason}"
    assert failure is not None, exc.reason
    assert case.load_error in failure.message, f"{failure.message!r} lacks {case.load_error!r}"
    if triton.is_embedded():
        assert failure.status == "Internal" and failure.from_python_stand_in, failure.raw
    else:
        assert failure.status == case.load_status, failure.raw
    assert triton.is_live()


def _check_standin_refusal(triton, case: Case, config: dict, files: dict) -> None:
    try:
        triton.load(case.name, config=config, files=files)
    except TritonServerError as exc:
        failure = load_failure(exc)
        assert failure is not None and failure.from_python_stand_in, exc.reason
        assert case.standin_load_error in failure.message, failure.message
        assert "stand-in" in failure.message, failure.message
        assert triton.is_live()
        return
    triton.unload(case.name)
    raise AssertionError(f"{case.name} loaded; the stand-in was to refuse it: {case.standin_load_error}")


def _check_inference(triton, case: Case) -> None:
    from tritonclient.utils import InferenceServerException

    wanted = list(case.expected) if case.expected else [o["name"] for o in case.config["output"]]
    for protocol in ("http", "grpc"):
        try:
            out = infer(triton, case.name, case.inputs, wanted, protocol)
        except InferenceServerException as exc:
            assert case.infer_error is not None, f"{case.name} ({protocol}): {exc}"
            status, text = case.infer_error
            assert text in exc.message(), f"{exc.message()!r} lacks {text!r}"
            if protocol == "http" and status is not None:  # None: the real code is not known
                assert exc.status() == str(status), f"HTTP status {exc.status()}, expected {status}"
            continue
        assert case.infer_error is None, f"{case.name} answered; the real backend fails: {case.infer_error}"
        for name, value in case.expected.items():
            np.testing.assert_allclose(out[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


def triton_log(triton) -> str:
    log = getattr(triton, "log", None)
    return log() if callable(log) else ""


def _subset(expected, actual) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(_subset(v, actual.get(k)) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            _subset(e, a) for e, a in zip(expected, actual))
    return expected == actual


# Model files -----------------------------------------------------------------------------
def torchscript(module) -> Callable[[], bytes]:
    def build() -> bytes:
        import torch

        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(torch.jit.script(module), buffer)
        return buffer.getvalue()

    build.__name__ = type(module).__name__
    return build


def onnx_graph(nodes, inputs, outputs, initializers=()) -> Callable[[], bytes]:
    """An ONNX model from (name, type, shape) triples; shapes may hold "batch"."""

    def build() -> bytes:
        from onnx import helper

        graph = helper.make_graph(
            nodes, "case",
            [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
            [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
            initializer=list(initializers),
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return model.SerializeToString()

    return build


def io_spec(name, data_type, dims, **extra) -> dict:
    return {"name": name, "data_type": data_type, "dims": list(dims), **extra}


def config(platform, inputs, outputs, max_batch_size=0, **extra) -> dict:
    """A config in the JSON form the load API takes; one CPU instance."""
    return {"platform": platform, "max_batch_size": max_batch_size, "input": inputs,
            "output": outputs, "instance_group": [{"kind": "KIND_CPU", "count": 1}], **extra}


def dumps(case: Case) -> str:
    return json.dumps(dict(case.config, name=case.name), indent=1)
