"""The book's stand-in for Triton's onnxruntime backend (``platform: "onnxruntime_onnx"``).

The embedded server (the nvidia-pytriton wheel) has no onnxruntime backend. Triton runs
a ``backends/onnxruntime/model.py`` through the python backend instead, for every model
whose platform is ``onnxruntime_onnx``; this is that file. It serves ``model.onnx`` with
the onnxruntime Python package by input and output names, batching like the real
backend. The NGC container serves the same configs with the real C++ backend.

Not reproduced: TensorRT/OpenVINO execution accelerators, config auto-complete,
sequence batching state, string tensors.
"""

import os

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonbook.standins.common import (
    StandinConfig,
    announce,
    gather_inputs,
    split_outputs,
    triton_type_of,
)

# onnxruntime's element type names and the TYPE_... they correspond to.
ORT_TYPES = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
}


def _check_names(kind, config_ios, model_ios, model_name):
    allowed = [io.name for io in model_ios]
    for io in config_ios:
        if io.name not in allowed:
            raise pb_utils.TritonModelException(
                f"unable to load model '{model_name}', unexpected inference {kind} "
                f"'{io.name}', allowed {kind}s are: {', '.join(allowed)}"
            )


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime as ort

        self.config = config = StandinConfig.from_args(args, "model.onnx")
        path = os.path.join(config.model_dir, config.version, config.default_model_filename)
        if not os.path.exists(path):
            raise pb_utils.TritonModelException(
                f"unable to find '{path}' for model instance '{config.instance_name}'"
            )

        available = ort.get_available_providers()
        if config.instance_kind == "GPU" and "CUDAExecutionProvider" in available:
            providers = [("CUDAExecutionProvider", {"device_id": config.device_id}), "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        options = ort.SessionOptions()
        intra = config.integer("intra_op_thread_count")
        inter = config.integer("inter_op_thread_count")
        if intra is not None:
            options.intra_op_num_threads = intra
        if inter is not None:
            options.inter_op_num_threads = inter
        self.session = ort.InferenceSession(path, sess_options=options, providers=providers)

        model_inputs, model_outputs = self.session.get_inputs(), self.session.get_outputs()
        # The real backend's load-time checks: counts, names, then data types.
        if len(config.inputs) != len(model_inputs):
            raise pb_utils.TritonModelException(
                f"unable to load model '{config.model_name}', configuration expects "
                f"{len(config.inputs)} inputs, model provides {len(model_inputs)}"
            )
        _check_names("input", config.inputs, model_inputs, config.model_name)
        _check_names("output", config.outputs, model_outputs, config.model_name)
        model_types = {io.name: ORT_TYPES.get(io.type, io.type) for io in [*model_inputs, *model_outputs]}
        for io in [*config.inputs, *config.outputs]:
            if model_types[io.name] != io.triton_type:
                raise pb_utils.TritonModelException(
                    f"unable to load model '{config.model_name}', unexpected datatype "
                    f"{io.triton_type} for '{io.name}', model provides {model_types[io.name]}"
                )
        self.output_names = [io.name for io in config.outputs]
        announce(
            pb_utils, "onnxruntime", "ONNX Runtime", config,
            f"Providers: {', '.join(self.session.get_providers())}.",
        )

    def execute(self, requests):
        try:
            feeds, sizes = gather_inputs(pb_utils, requests, self.config)
            results = self.session.run(self.output_names, feeds)
            outputs = dict(zip(self.output_names, results))
            for io in self.config.outputs:
                if outputs[io.name].dtype != np.dtype(io.dtype):
                    raise ValueError(
                        f"configuration expects datatype {io.triton_type} for output "
                        f"'{io.name}', model provides {triton_type_of(outputs[io.name].dtype)}"
                    )
            per_request = split_outputs(outputs, sizes, self.config)
        except Exception as exc:  # one error response per request, never a crash
            error = pb_utils.TritonError(f"onnxruntime stand-in: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, np.ascontiguousarray(a)) for name, a in tensors.items()]
            )
            for tensors in per_request
        ]
