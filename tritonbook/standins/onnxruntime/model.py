"""The book's stand-in for Triton's onnxruntime backend (``platform: "onnxruntime_onnx"``).

The embedded server (the nvidia-pytriton wheel) has no onnxruntime backend. Triton runs
a ``backends/onnxruntime/model.py`` through the python backend instead, for every model
whose platform is ``onnxruntime_onnx``; this is that file. It serves ``model.onnx`` with
the onnxruntime Python package and follows the real backend (onnxruntime_backend
``src/onnxruntime.cc`` and ``src/onnxruntime_utils.cc``, r24.10; the same rules and texts
on r26.06):

* config auto-complete when the config lists no inputs or no outputs: the model's
  tensors, ``max_batch_size`` 4 and dynamic batching when every tensor has a dynamic
  first dimension (the server's default-max-batch-size);
* load-time checks in the real order and words: input count (initializers left out),
  optional inputs only without batching, names, data types, dims (a batching model needs
  -1 as its first dimension; outputs must match exactly);
* initializers as ``optional: true`` inputs: a request may leave them out;
* batching: the requests of one execution are concatenated on dim 0 and split back.

Where it differs, and why (the server log says so at load):
* a failed load is reported as ``Internal: TritonModelException: <message>``: the python
  backend reports every initialize() failure as Internal; the real backend says
  ``Invalid argument: <message>`` (the message is the same);
* ``intra_op_thread_count`` / ``inter_op_thread_count`` apply per instance process here;
  TensorRT/OpenVINO accelerators, string tensors, BF16 (the container serves BF16 since
  26.03), sequence batching controls and states are not served.
"""

import os

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonbook.standins.common import (
    error_responses,
    initialize_reporting_internal,
    responses,
    StandinConfig,
    announce,
    gather_inputs,
    model_file_of_autocomplete_stub,
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
    "tensor(string)": "TYPE_STRING",
}
# The server's default-max-batch-size (core backend_model.cc), used by auto-complete.
DEFAULT_MAX_BATCH_SIZE = 4
NOT_SERVED_HERE = ("TYPE_STRING", "TYPE_BF16")


def _dims(shape) -> list[int]:
    """ONNX dims as Triton writes them: symbolic or unknown dims are -1."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


def _shape_text(dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _session(path, options=None):
    import onnxruntime as ort

    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def _type_of(io) -> str:
    return ORT_TYPES.get(io.type, "TYPE_<invalid>")


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        """Fill inputs, outputs and max_batch_size from the model, as the real backend does
        (onnxruntime.cc AutoCompleteConfig, AutoCompleteMaxBatch, AutoCompleteIO)."""
        config = auto_complete_model_config.as_dict()
        if config.get("input") and config.get("output"):
            return auto_complete_model_config
        path = model_file_of_autocomplete_stub(config, "model.onnx")
        if path is None or not os.path.exists(path):
            return auto_complete_model_config  # initialize() reports the missing file
        session = _session(path)
        inputs, outputs = session.get_inputs(), session.get_outputs()
        batching = all(len(io.shape) >= 1 and _dims(io.shape)[0] == -1 for io in [*inputs, *outputs])
        max_batch_size = int(config.get("max_batch_size", 0))
        if batching and max_batch_size == 0:
            max_batch_size = DEFAULT_MAX_BATCH_SIZE
            auto_complete_model_config.set_max_batch_size(max_batch_size)
        if not batching and max_batch_size != 0:
            raise pb_utils.TritonModelException(
                f"autofill failed for model '{config['name']}': model does not support batching "
                "while non-zero max_batch_size is specified"
            )
        if max_batch_size > 1 and "sequence_batching" not in config:
            auto_complete_model_config.set_dynamic_batching()
        for kind, ios in (("input", inputs), ("output", outputs)):
            if config.get(kind):
                continue
            add = auto_complete_model_config.add_input if kind == "input" else auto_complete_model_config.add_output
            for io in ios:
                dims = _dims(io.shape)[1:] if max_batch_size > 0 else _dims(io.shape)
                add({"name": io.name, "data_type": _type_of(io), "dims": dims or [1]})
        return auto_complete_model_config

    def initialize(self, args):
        initialize_reporting_internal(pb_utils, self._initialize, args)

    def _initialize(self, args):
        import onnxruntime as ort

        self.config = config = StandinConfig.from_args(args, "model.onnx")
        config.refuse_sequence_batching("onnxruntime")
        path = os.path.join(config.model_dir, config.version, config.default_model_filename)
        if os.path.isdir(path):
            path = os.path.join(path, "model.onnx")
        if not os.path.exists(path):
            raise ValueError(f"unable to find '{path}' for model instance '{config.instance_name}'")

        available = ort.get_available_providers()
        if config.instance_kind == "GPU" and "CUDAExecutionProvider" in available:
            providers = [("CUDAExecutionProvider", {"device_id": config.device_id}), "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        options = ort.SessionOptions()
        self._apply_parameters(options)
        try:
            self.session = ort.InferenceSession(path, sess_options=options, providers=providers)
        except Exception as exc:  # the real backend: "onnx runtime error <code>: <message>"
            raise ValueError(f"onnx runtime error: {exc}") from None
        self._validate()
        self.output_names = [io.name for io in config.outputs]
        announce(
            pb_utils, "onnxruntime", "ONNX Runtime", config,
            f"Providers: {', '.join(self.session.get_providers())}. Thread settings apply to this "
            "instance's process only (the real backend: to its session).",
        )

    def _apply_parameters(self, options):
        config = self.config
        intra = config.integer("intra_op_thread_count")
        inter = config.integer("inter_op_thread_count")
        if intra is not None and intra > 0:
            options.intra_op_num_threads = intra
        if inter is not None and inter > 0:
            options.inter_op_num_threads = inter
        mode = config.parameters.get("execution_mode")
        if mode is not None:
            if mode not in ("0", "1"):
                raise ValueError(
                    "Invalid configuration value provided. Expected values for  execution_mode are "
                    f"0 or 1 but got {mode} ."
                )
            import onnxruntime as ort

            options.execution_mode = (ort.ExecutionMode.ORT_SEQUENTIAL, ort.ExecutionMode.ORT_PARALLEL)[int(mode)]
        for key in ("enable_mem_arena", "enable_mem_pattern"):
            if key in config.parameters:
                setattr(options, key, config.flag(key, True))

    # Load-time checks (onnxruntime.cc ValidateInputs / ValidateOutputs) ---------------
    def _validate(self):
        config, model = self.config, self.config.model_name
        inputs = {io.name: io for io in self.session.get_inputs()}
        initializers = {io.name: io for io in self.session.get_overridable_initializers()}
        outputs = {io.name: io for io in self.session.get_outputs()}
        required = [io for io in config.inputs if not io.optional]
        if len(required) != len(inputs):
            raise ValueError(
                f"unable to load model '{model}', configuration expects {len(required)} inputs, "
                f"model provides {len(inputs)}"
            )
        allowed_inputs = {**inputs, **initializers}
        for io in config.inputs:
            if io.optional and config.max_batch_size != 0:
                raise ValueError(
                    f"unable to load model '{model}', optional input '{io.name}' is not supported "
                    "for models that support batching"
                )
            self._check_one("input", io, allowed_inputs, exact=False)
        for io in config.outputs:
            self._check_one("output", io, outputs, exact=True)

    def _check_one(self, kind, io, model_ios, exact):
        config, model = self.config, self.config.model_name
        if io.name not in model_ios:
            raise ValueError(
                f"unexpected inference {kind} '{io.name}', allowed {kind}s are: "
                + ", ".join(sorted(model_ios))
            )
        if io.triton_type in NOT_SERVED_HERE:
            raise ValueError(
                f"the book's stand-in does not serve {io.triton_type} ({kind} '{io.name}'); "
                "the NGC container's onnxruntime backend does (BF16 since Triton 26.03)"
            )
        provided = _type_of(model_ios[io.name])
        if provided != io.triton_type:
            raise ValueError(
                f"unable to load model '{model}', configuration expects datatype {io.triton_type} "
                f"for {kind} '{io.name}', model provides {provided}"
            )
        model_dims = _dims(model_ios[io.name].shape)
        config_dims = io.reshape if io.reshape is not None else io.dims
        if len(model_dims) == 0:  # a scalar: only 1s in the config, and no batching
            if any(d != 1 for d in config_dims) or config.max_batch_size > 0:
                raise ValueError(
                    f"unable to load model '{model}', scalar tensor '{io.name}', should only provide "
                    "1 in the model configuration when the model doesn't support batching. Model "
                    f"configuration provided: {_shape_text(config_dims)}."
                )
            return
        prefix = f"model '{model}', tensor '{io.name}': "
        if config.max_batch_size > 0:
            if model_dims[0] != -1:
                raise ValueError(
                    prefix + "for the model to support batching the shape should have at least 1 "
                    "dimension and the first dimension must be -1; but shape expected by the model "
                    f"is {_shape_text(model_dims)}"
                )
            full = [-1, *config_dims]
            described = (
                f"{len(full)} dimensions (an initial batch dimension because max_batch_size > 0 "
                f"followed by the explicit tensor shape, making complete shape {_shape_text(full)})"
            )
        else:
            full = list(config_dims)
            described = f"{len(full)} dimensions (shape {_shape_text(full)})"
        matches = len(full) == len(model_dims) and all(
            m == c or (m == -1 and not exact) for m, c in zip(model_dims, full)
        )
        if not matches:
            raise ValueError(
                prefix + f"the model expects {len(model_dims)} dimensions (shape "
                f"{_shape_text(model_dims)}) but the model configuration specifies {described}"
            )

    # Execution ------------------------------------------------------------------------
    def execute(self, requests):
        try:
            feeds, sizes = gather_inputs(pb_utils, requests, self.config)
        except ValueError as exc:
            return error_responses(pb_utils, requests, str(exc), pb_utils.TritonError.INVALID_ARG)
        try:
            results = self.session.run(self.output_names, feeds)
            outputs = dict(zip(self.output_names, results))
            for io in self.config.outputs:
                if outputs[io.name].dtype != np.dtype(io.dtype):
                    raise ValueError(
                        f"configuration expects datatype {io.triton_type} for output "
                        f"'{io.name}', model provides {triton_type_of(outputs[io.name].dtype)}"
                    )
            per_request = split_outputs(outputs, sizes, self.config)
        except Exception as exc:  # the real backend: INTERNAL "onnx runtime error ..."
            return error_responses(pb_utils, requests, f"onnx runtime error: {exc}", pb_utils.TritonError.INTERNAL)
        return responses(pb_utils, per_request)
