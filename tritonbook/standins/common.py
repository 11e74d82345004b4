"""What the stand-in backends share: reading the config, batching, logging.

This runs inside the python backend's stub, which provides
``triton_python_backend_utils``; nothing here imports torch or onnxruntime.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

# Triton's data types and their numpy equivalents (strings are not served by the stand-ins).
NUMPY_DTYPES = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
}


def triton_type_of(dtype) -> str:
    """TYPE_... name of a numpy dtype, or a readable name if Triton has none."""
    dtype = np.dtype(dtype)
    for name, candidate in NUMPY_DTYPES.items():
        if np.dtype(candidate) == dtype:
            return name
    return f"unsupported ({dtype})"


@dataclass
class IO:
    name: str
    triton_type: str
    dims: list[int]
    optional: bool = False
    reshape: list[int] | None = None

    @property
    def dtype(self):
        return NUMPY_DTYPES[self.triton_type]


@dataclass
class StandinConfig:
    """The parts of a model's config that a stand-in backend needs."""

    model_name: str
    model_dir: str
    version: str
    max_batch_size: int
    inputs: list[IO]
    outputs: list[IO]
    default_model_filename: str
    parameters: dict[str, str]
    instance_name: str
    instance_kind: str  # "CPU", "GPU" or "MODEL"
    device_id: int
    sequence_batching: bool = False  # the config has a sequence_batching block

    @classmethod
    def from_args(cls, args: dict, default_filename: str) -> "StandinConfig":
        config = json.loads(args["model_config"])

        def ios(key):
            # Each stand-in decides which data types it refuses, in its backend's words.
            items = []
            for io in config.get(key, []):
                reshape = io.get("reshape")
                items.append(IO(
                    io["name"], io["data_type"], [int(d) for d in io.get("dims", [])],
                    optional=bool(io.get("optional", False)),
                    reshape=None if reshape is None else [int(d) for d in reshape.get("shape", [])],
                ))
            return items

        return cls(
            model_name=args["model_name"],
            model_dir=args["model_repository"],
            version=args["model_version"],
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=ios("input"),
            outputs=ios("output"),
            default_model_filename=config.get("default_model_filename") or default_filename,
            parameters={k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()},
            instance_name=args.get("model_instance_name", args["model_name"]),
            instance_kind=args.get("model_instance_kind", "CPU"),
            device_id=int(args.get("model_instance_device_id", 0) or 0),
            sequence_batching="sequence_batching" in config,
        )

    def refuse_sequence_batching(self, backend: str) -> None:
        """Stand-ins serve no sequence batching: say so at load rather than fail per request."""
        if self.sequence_batching:
            raise ValueError(
                f"the book's stand-in for the {backend} backend does not serve sequence_batching "
                f"(model '{self.model_name}'); the NGC container's {backend} backend does, with "
                "control inputs (START, END, READY, CORRID) and states as extra model inputs"
            )

    def flag(self, key: str, default: bool) -> bool:
        """A boolean parameter as Triton's backends read them ("true"/"false")."""
        value = self.parameters.get(key)
        if value is None or value == "":
            return default
        lowered = value.lower()  # backend_common's ParseBoolValue
        if lowered in ("true", "on", "1"):
            return True
        if lowered in ("false", "off", "0"):
            return False
        raise ValueError(f"failed to convert '{value}' to boolean")

    def integer(self, key: str) -> int | None:
        return integer(self.parameters.get(key))


def integer(value: str | None) -> int | None:
    """A config parameter as an integer; None when it is unset or empty. The error says
    what Triton's own backends say of a parameter that is not a number."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"failed to convert '{value}' to integral number") from None


def gather_inputs(pb_utils, requests, config: StandinConfig):
    """Numpy arrays per config input, requests concatenated on dim 0 when batching.

    Returns (arrays by input name, batch size of each request). With
    ``max_batch_size == 0`` there is one request at a time and shapes pass through.
    """
    arrays: dict[str, list[np.ndarray]] = {io.name: [] for io in config.inputs}
    sizes = []
    for request in requests:
        first = None
        for io in config.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, io.name)
            if tensor is None and io.optional:
                continue  # an optional input left out (onnxruntime: the initializer's value)
            if tensor is None:  # Triton core checks this; keep the message clear anyway
                raise ValueError(f"request has no input '{io.name}'")
            array = tensor.as_numpy()
            arrays[io.name].append(array)
            if first is None:
                first = array.shape[0] if config.max_batch_size > 0 and array.ndim else 1
        sizes.append(first or 1)
    if config.max_batch_size > 0:
        joined = {name: np.concatenate(parts, axis=0) for name, parts in arrays.items() if parts}
    else:
        joined = {name: parts[0] for name, parts in arrays.items() if parts}
    return joined, sizes


def model_file_of_autocomplete_stub(config: dict, default_filename: str) -> str | None:
    """The model file, seen from ``auto_complete_config``.

    The python backend passes that function the config alone. Its stub process is started
    with ``<model folder>/<version>/<file>`` as its first argument (python_backend
    stub_launcher.cc), and that is the only place the model's folder can be read from.
    """
    try:
        with open("/proc/self/cmdline", "rb") as f:
            first = f.read().split(b"\0")[1].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    return os.path.join(os.path.dirname(first), config.get("default_model_filename") or default_filename)


def split_outputs(outputs: dict[str, np.ndarray], sizes: list[int], config: StandinConfig):
    """Per request, its slice of every output (the whole output without batching)."""
    if config.max_batch_size == 0:
        return [outputs]
    total = sum(sizes)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise ValueError(
                f"output '{name}' has shape {list(array.shape)}; with max_batch_size > 0 its "
                f"first dimension must be the batch size {total}"
            )
    per_request, start = [], 0
    for size in sizes:
        per_request.append({name: array[start : start + size] for name, array in outputs.items()})
        start += size
    return per_request


def announce(pb_utils, backend: str, real_backend: str, config: StandinConfig, detail: str) -> None:
    """The load-time line that says this is a stand-in, in the server log."""
    pb_utils.Logger.log_info(
        f"[tritonbook] model '{config.model_name}' version {config.version} "
        f"({config.instance_name}) is served by the book's python stand-in for the "
        f"'{backend}' backend; the NGC container serves it with the real {real_backend} "
        f"backend instead. {detail} Its served config says runtime \"model.py\" (this file); "
        "leave that field out of configs for the container, where it selects another runtime."
    )


def error_responses(pb_utils, requests, message: str, code=None):
    """One error response per request: a bad request never takes the model down."""
    error = pb_utils.TritonError(message, pb_utils.TritonError.INTERNAL if code is None else code)
    return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]


def responses(pb_utils, per_request):
    """One response per request from its {output name: array}."""
    return [
        pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, np.ascontiguousarray(a)) for name, a in tensors.items()]
        )
        for tensors in per_request
    ]


def initialize_reporting_internal(pb_utils, initialize, args) -> None:
    """Run a stand-in's initialize; any failure becomes the TritonModelException the python
    backend reports (always as Internal, the exception's text as the message)."""
    try:
        initialize(args)
    except Exception as exc:
        raise pb_utils.TritonModelException(str(exc)) from None
