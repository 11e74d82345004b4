"""One inference call over HTTP or gRPC with tritonclient, for code that is not the lesson.

Chapters that teach the client API write the calls out; everything else uses ``infer``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


def infer(triton, model: str, inputs: dict[str, np.ndarray], outputs: list[str],
          protocol: str = "http", **kwargs) -> dict[str, np.ndarray]:
    """Send ``inputs`` (name -> array) to ``model``; return the named outputs as arrays.

    ``triton`` is a ``tritonbook.server.Triton``; ``protocol`` is "http" or "grpc";
    extra keyword arguments go to the client's ``infer`` (model_version, timeouts...).
    Errors come back as ``tritonclient.utils.InferenceServerException``.
    """
    if protocol == "http":
        import tritonclient.http as module

        client = triton.http()
    elif protocol == "grpc":
        import tritonclient.grpc as module

        client = triton.grpc()
    else:
        raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
    wanted = [module.InferRequestedOutput(name) for name in outputs]
    result = client.infer(model, request_inputs(module, inputs), outputs=wanted, **kwargs)
    return {name: result.as_numpy(name) for name in outputs}


def request_inputs(module, inputs: dict[str, np.ndarray]) -> list:
    """``InferInput`` objects of ``module`` (tritonclient.http or .grpc) holding the arrays."""
    from tritonclient.utils import np_to_triton_dtype

    request = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        request.append(tensor)
    return request


# A failed load, as Triton's core words it (model_repository_manager.cc and
# model_lifecycle.cc): "load failed for model 'M': version N is at STATE state: STATUS:
# MESSAGE;". STATUS is the backend's error code as text ("Invalid argument", "Internal").
_LOAD_FAILED = re.compile(
    r"load failed for model '(?P<model>[^']*)': version (?P<version>\d+) is at "
    r"(?P<state>[A-Z]+) state: (?P<status>[A-Z][a-z]+(?: [a-z]+)?): (?P<message>.*?);?\s*$",
    re.S,
)


@dataclass
class LoadFailure:
    """Why a model did not load, split into the core's frame and the backend's words."""

    model: str
    version: int
    state: str  # the version's state after the attempt: UNAVAILABLE, or READY (kept)
    status: str  # the backend's error code: "Invalid argument", "Internal", ...
    message: str  # the backend's own message, the same on the container and the stand-ins
    raw: str  # the whole answer

    @property
    def from_python_stand_in(self) -> bool:
        """True when a python backend raised it (the stand-ins' loads): the python
        backend reports every initialize() failure as Internal, with the exception's
        class name in front of the message."""
        return self.raw_message.startswith("TritonModelException: ")

    @property
    def raw_message(self) -> str:
        return _LOAD_FAILED.search(self.raw).group("message")


def load_failure(exc: BaseException) -> LoadFailure | None:
    """The parts of a failed load's answer, or None if ``exc`` is not one."""
    text = server_answer(exc)
    match = _LOAD_FAILED.search(text)
    if match is None:
        return None
    message = match.group("message")
    # The python backend puts the exception's class name first (pybind11's what()).
    message = message.removeprefix("TritonModelException: ")
    return LoadFailure(match.group("model"), int(match.group("version")), match.group("state"),
                       match.group("status"), message, text)


def server_answer(exc: BaseException) -> str:
    """The server's own error message, for printing: no client traceback, and no
    Python stack of a python-backend model (the stand-ins add one after "At:")."""
    from tritonclient.utils import InferenceServerException

    from tritonbook.server import TritonServerError

    if isinstance(exc, InferenceServerException):
        text = exc.message() or str(exc)
    elif isinstance(exc, TritonServerError):
        text = exc.reason
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text.split("\n\nAt:\n")[0].strip()


def request_counts(triton, model: str, grown_from: dict | None = None, timeout: float = 10.0,
                   compute: bool = False) -> dict:
    """A model's ``inference_count`` (images) and ``execution_count`` (model runs).

    Triton records a request's statistics just after it sends the answer, so a client
    that reads them at once can still see the old counts. Given the counts from before
    a request (``grown_from``), this reads until ``execution_count`` has grown, or until
    ``timeout`` seconds have passed (then it returns what it read last). With
    ``compute``, also ``compute_ms``: the milliseconds the model has spent computing
    (the statistics' ``compute_infer``), summed over its versions.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        stats = triton.http().get_inference_statistics(model)["model_stats"]
        counts = {key: sum(int(s[key]) for s in stats) for key in ("inference_count", "execution_count")}
        if compute:
            counts["compute_ms"] = sum(int(s["inference_stats"]["compute_infer"]["ns"]) for s in stats) / 1e6
        if grown_from is None or counts["execution_count"] > grown_from["execution_count"]:
            return counts
        if time.monotonic() > deadline:
            return counts
        time.sleep(0.05)
