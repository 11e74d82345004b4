"""The book's stand-in for ``platform: "torch_aoti"`` (pytorch_backend, Triton 26.03+).

Triton 2.51's core, in the embedded server, does not know this platform and refuses a
config that names it when it polls the repository. It accepts any platform together with
a backend name it does not know, so ``tritonbook.server`` loads such models with a config
that adds ``backend: "torch_aoti_standin"``; the python backend then runs this file. The
repository keeps the container's config unchanged.

It serves ``model.pt2``, an AOTInductor package from
``torch._inductor.aoti_compile_and_package``, with the torch of the book's environment,
following the naming of the pinned container (pytorch_backend README, 26.05+): inputs
``INPUT__<i>`` (or ``ARGS[i]``) are the package's positional arguments in index order,
outputs ``OUTPUT__<i>`` (or ``RESULT[i]``, ``RESULT`` for a single tensor) its results. With ``max_batch_size > 0`` the requests of
one execution are concatenated on dim 0 and the outputs split back.

Not reproduced: dictionary and keyword-argument names (``KWARGS[k]``, ``ARGS[i][k]``,
``RESULT[k]``), sequence batching, weight sharing, CUDA streams.
"""

import os
import re

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonbook.instance import instance_device
from tritonbook.standins.common import (
    StandinConfig,
    announce,
    error_responses,
    gather_inputs,
    initialize_reporting_internal,
    responses,
    split_outputs,
)

# Flat positions in the call specification: ordinal names, or the forward-based names of
# plain positional tensors and tuple results. RESULT alone names a single-tensor output.
POSITION = {
    "input": re.compile(r"^(?:INPUT__(\d+)|ARGS\[(\d+)\])$"),
    "output": re.compile(r"^(?:OUTPUT__(\d+)|RESULT\[(\d+)\]|RESULT)$"),
}


def _indices(kind, ios):
    """Position of each config tensor in the package's flat arguments or results."""
    positions = []
    for io in ios:
        match = POSITION[kind].match(io.name)
        if match is None:
            ordinal = "INPUT__<i> or ARGS[i]" if kind == "input" else "OUTPUT__<i>, RESULT[i] or RESULT"
            raise ValueError(
                f"{kind} '{io.name}': the book's stand-in for torch_aoti serves {ordinal}; the NGC "
                "container also addresses dictionary entries and keyword arguments "
                "(KWARGS[k], ARGS[i][k], RESULT[k]; pytorch_backend README, 26.05+)"
            )
        index = match.group(1) or match.group(2)
        positions.append(int(index) if index is not None else 0)
    if sorted(positions) != list(range(len(positions))):
        raise ValueError(f"{kind} indices must be 0..{len(positions) - 1}, got {sorted(positions)}")
    return positions


class TritonPythonModel:
    def initialize(self, args):
        initialize_reporting_internal(pb_utils, self._initialize, args)

    def _initialize(self, args):
        import torch

        self.torch = torch
        self.config = config = StandinConfig.from_args(args, "model.pt2")
        config.refuse_sequence_batching("torch_aoti")
        path = os.path.join(config.model_dir, config.version, config.default_model_filename)
        if not os.path.exists(path):
            raise ValueError(f"unable to find '{path}' for model instance '{config.instance_name}'")
        if not config.outputs:
            raise ValueError(f"model '{config.model_name}' has no outputs in its configuration")
        self.input_positions = _indices("input", config.inputs)
        self.output_positions = _indices("output", config.outputs)
        self.device = instance_device(args)
        device_index = self.device.index if self.device.type == "cuda" else -1
        self.package = torch._inductor.aoti_load_package(path, device_index=device_index)
        compiled_for = self.package.get_metadata().get("AOTI_DEVICE_KEY", "?")
        if compiled_for != self.device.type:
            raise ValueError(
                f"'{path}' was compiled for {compiled_for}, but instance '{config.instance_name}' runs "
                f"on {self.device}: compile the package on the device that will serve it"
            )
        announce(
            pb_utils, "torch_aoti", "PyTorch (platform torch_aoti)", config,
            f"torch {torch.__version__}, package compiled for {compiled_for}. Triton 2.51's core does "
            "not know platform 'torch_aoti': tritonbook loaded this model with a config override "
            "that adds backend 'torch_aoti_standin'.",
        )

    def execute(self, requests):
        torch, config = self.torch, self.config
        try:
            arrays, sizes = gather_inputs(pb_utils, requests, config)
        except ValueError as exc:
            return error_responses(pb_utils, requests, str(exc), pb_utils.TritonError.INVALID_ARG)
        arguments = [None] * len(config.inputs)
        for io, position in zip(config.inputs, self.input_positions):
            # The package reads memory as laid out at compile time: contiguous.
            arguments[position] = torch.from_numpy(np.ascontiguousarray(arrays[io.name])).to(self.device)
        try:
            with torch.inference_mode():
                result = self.package(*arguments)
            single = isinstance(result, torch.Tensor)
            returned = [result] if single else list(result)
            if not single and any(io.name == "RESULT" for io in config.outputs):
                raise RuntimeError(f"the package returns {len(returned)} outputs: name them RESULT[i]")
            outputs = {}
            for io, position in zip(config.outputs, self.output_positions):
                if position >= len(returned):
                    raise RuntimeError(f"output '{io.name}': the package returns {len(returned)} outputs")
                outputs[io.name] = returned[position].detach().cpu().numpy()
            per_request = split_outputs(outputs, sizes, config)
        except Exception as exc:
            return error_responses(pb_utils, requests, f"PyTorch execute failure: {exc}", pb_utils.TritonError.INTERNAL)
        return responses(pb_utils, per_request)
