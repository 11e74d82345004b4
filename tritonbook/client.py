"""One inference call over HTTP or gRPC with tritonclient, for code that is not the lesson.

Chapters that teach the client API write the calls out; everything else uses ``infer``.
"""

from __future__ import annotations

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
