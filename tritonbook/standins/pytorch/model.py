"""The book's stand-in for Triton's PyTorch (libtorch) backend (``platform: "pytorch_libtorch"``).

The embedded server (the nvidia-pytriton wheel) has no libtorch backend. Triton runs a
``backends/pytorch/model.py`` through the python backend instead, for every model whose
platform is ``pytorch_libtorch`` (backend ``pytorch``); this is that file. It loads the
TorchScript ``model.pt`` with the torch of the book's environment and follows the
contract of the real backend (pytorch_backend ``src/libtorch.cc``, r24.10):

* inputs are matched by ``forward()`` argument names when every config input is one;
  else by the ``<name>__<index>`` convention; else by config order (with a warning);
* outputs by ``<name>__<index>``, else by config order; a model returns a Tensor or a
  tuple of Tensors;
* with ``max_batch_size > 0`` the requests of one execution are concatenated on dim 0
  and the outputs are split back; with ``0`` shapes pass through unchanged;
* the device comes from the instance kind (KIND_GPU: ``cuda:<id>``; else the CPU);
* ``torch.inference_mode`` unless ``INFERENCE_MODE`` is "false";
* the same error texts for a config that does not match the model.

The NGC container serves the same configs with the real C++ backend.
Not reproduced, each refused or logged where a config asks for it: string tensors,
Dict(str, Tensor) inputs, sequence batching (control inputs and state), weight sharing
across instances, cache cleaning, server-wide thread settings. CUDA streams are not
reproduced either.
"""

import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonbook.instance import instance_device
from tritonbook.standins.common import (
    error_responses,
    initialize_reporting_internal,
    responses,
    StandinConfig,
    announce,
    gather_inputs,
    split_outputs,
    triton_type_of,
)

def _error(message):
    return pb_utils.TritonModelException(message)


class InvalidArgument(ValueError):
    """An error the real backend answers with INVALID_ARG (HTTP 400), not INTERNAL (500)."""


# Data types libtorch has a tensor type for (libtorch_utils ModelConfigDataTypeToTorchType).
TORCH_TYPES = ("TYPE_BOOL", "TYPE_UINT8", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64",
               "TYPE_FP16", "TYPE_FP32", "TYPE_FP64")


class TritonPythonModel:
    def initialize(self, args):
        initialize_reporting_internal(pb_utils, self._initialize, args)

    def _initialize(self, args):
        import torch

        self.torch = torch
        self.config = config = StandinConfig.from_args(args, "model.pt")
        # backend BackendModel: the libtorch backend does not allow optional inputs.
        for io in config.inputs:
            if io.optional:
                raise ValueError(f"'optional' is set to true for input '{io.name}' while the backend "
                                 "model doesn't support optional input")
        config.refuse_sequence_batching("pytorch")
        self._apply_parameters()
        path = os.path.join(config.model_dir, config.version, config.default_model_filename)
        if not os.path.exists(path):
            raise ValueError(f"unable to find '{path}' for model instance '{config.instance_name}'")

        # KIND_GPU: model and inputs on cuda:<id>. KIND_CPU: the CPU. KIND_MODEL: the
        # model stays where it was saved and inputs arrive on the CPU, as in libtorch.cc.
        self.device = instance_device(args)
        try:
            if config.instance_kind == "MODEL":
                self.model = torch.jit.load(path)
            else:
                self.model = torch.jit.load(path, map_location=self.device)
        except Exception as exc:
            raise ValueError(f"failed to load model '{config.model_name}': {exc}") from None
        self.model.eval()

        self.input_order = self._input_order()
        self._check_types()
        self.output_index = self._output_index()
        announce(
            pb_utils, "pytorch", "libtorch", config,
            f"torch {torch.__version__} on {self.device}; inputs by {self.input_convention}, "
            f"outputs by {self.output_convention}.",
        )

    def _check_types(self):
        """libtorch.cc ValidateInputs / ValidateOutputs: at least one of each, known types."""
        config = self.config
        for kind, ios in (("input", config.inputs), ("output", config.outputs)):
            if not ios:
                raise ValueError(f"model configuration must contain at least one {kind}, none were specified.")
            for io in ios:
                if io.triton_type == "TYPE_STRING":
                    raise ValueError(
                        f"the book's stand-in does not serve TYPE_STRING ({kind} '{io.name}'); the NGC "
                        "container's libtorch backend serves it as a 1-D List[str]"
                    )
                if io.triton_type not in TORCH_TYPES:
                    raise ValueError(f"unsupported datatype {io.triton_type} for {kind} '{io.name}' "
                                     f"for model '{config.model_name}'")

    def _apply_parameters(self):
        torch, config = self.torch, self.config
        name = config.instance_name
        self.inference_mode = config.flag("INFERENCE_MODE", True)
        self.optimized_execution = not config.flag("DISABLE_OPTIMIZED_EXECUTION", False)
        cleaning = config.flag("ENABLE_CACHE_CLEANING", False)
        cudnn = not config.flag("DISABLE_CUDNN", False)
        torch.backends.cudnn.enabled = cudnn
        # The TorchScript switches, as libtorch.cc sets them (process-wide in torch).
        switches = {
            "ENABLE_TENSOR_FUSER": ("Tensor fuser", torch._C._jit_set_texpr_fuser_enabled),
            "ENABLE_WEIGHT_SHARING": ("Weight sharing", None),
            "ENABLE_JIT_PROFILING": ("Jit profiling", torch._C._jit_set_profiling_mode),
            "ENABLE_JIT_EXECUTOR": ("Jit executor", torch._C._jit_set_profiling_executor),
        }
        # pt/model_state.cc ParseParameters logs each setting at load, in this order, only
        # for a config with parameters: the first four always, the others when given.
        lines = []
        if config.parameters:
            lines = [("Optimized execution", self.optimized_execution), ("Cache Cleaning", cleaning),
                     ("Inference Mode", self.inference_mode), ("cuDNN", cudnn)]
        for key, (label, switch) in switches.items():
            if key in config.parameters:
                on = config.flag(key, False)
                lines.append((label, on))
                if switch is not None:
                    switch(on)
        for label, on in lines:
            pb_utils.Logger.log_info(
                f"{label} is {'enabled' if on else 'disabled'} for model instance '{config.model_name}'")
        # Threads: the container's backend sets these once for the whole server (the first
        # model that names them wins); a stand-in instance is its own process.
        intra = config.integer("INTRA_OP_THREAD_COUNT")
        inter = config.integer("INTER_OP_THREAD_COUNT")
        if intra is not None and intra > 0:
            torch.set_num_threads(intra)
            pb_utils.Logger.log_info(f"Intra op thread count is set to {torch.get_num_threads()} "
                                     f"for model instance '{config.model_name}'")
        if inter is not None and inter > 0:
            try:
                torch.set_num_interop_threads(inter)
            except RuntimeError:  # only possible before torch's first parallel work
                # The container's backend (25.11 and later) ignores this failure too;
                # 24.10's did not catch it (server #7836). Not imitated: an abort.
                pass
            pb_utils.Logger.log_info(f"Inter op thread count is set to {torch.get_num_interop_threads()} "
                                     f"for model instance '{config.model_name}'")
        if (intra or 0) > 0 or (inter or 0) > 0:
            pb_utils.Logger.log_warn(
                f"[tritonbook] {name}: INTRA_OP_THREAD_COUNT/INTER_OP_THREAD_COUNT apply to this "
                "instance's process only. In the NGC container they are server-wide: the first "
                "model that sets them fixes them for every model, for the server's life."
            )
        for ignored in ("ENABLE_WEIGHT_SHARING", "ENABLE_CACHE_CLEANING"):
            if config.flag(ignored, False):
                pb_utils.Logger.log_warn(
                    f"[tritonbook] {ignored} has no effect in the stand-in (one process per instance)")

    # Input and output naming (libtorch.cc: ValidateInputs, GetNamingConvention) ------
    def _input_order(self):
        """Position in forward() of each config input, in config order."""
        config = self.config
        arguments = self.model.forward.schema.arguments
        if arguments and arguments[0].name == "self":
            arguments = arguments[1:]
        kinds = [str(a.type) for a in arguments]
        if sum(kind.startswith("Dict") for kind in kinds) > 1:
            raise _error(
                "Multiple inputs of kind DictType were detected. Only a single input of "
                "type Dict(str, Tensor) is supported."
            )
        if len(kinds) == 1 and kinds[0].startswith("Dict"):
            raise _error(
                "the book's stand-in does not serve a Dict(str, Tensor) input; "
                "the NGC container's libtorch backend does"
            )
        for kind in kinds:
            if kind != "Tensor" and not kind.startswith("List"):
                raise _error(
                    f"An input of type '{kind}' was detected in the model. Only a single input "
                    "of type Dict(str, Tensor) or input(s) of type Tensor are supported."
                )
        if len(arguments) != len(config.inputs):
            raise _error(
                f"unable to load model '{config.model_name}', configuration expects "
                f"{len(config.inputs)} inputs, model provides {len(arguments)}"
            )
        names = [a.name for a in arguments]
        config_names = [io.name for io in config.inputs]
        if all(name in names for name in config_names):
            self.input_convention = "forward() argument names"
            return [names.index(name) for name in config_names]
        indices = self._named_indices("input", config_names)
        if indices is not None:
            self.input_convention = "the <name>__<index> convention"
            for name, index in zip(config_names, indices):
                if index >= len(arguments):
                    raise _error(
                        f"unable to load model '{config.model_name}', input '{name}' refers to "
                        f"index {index}, but the model's forward() takes {len(arguments)} inputs"
                    )
            return indices
        self.input_convention = "config order"
        return list(range(len(config_names)))

    def _output_index(self):
        names = [io.name for io in self.config.outputs]
        indices = self._named_indices("output", names)
        if indices is not None:
            self.output_convention = "the <name>__<index> convention"
            return dict(zip(names, indices))
        self.output_convention = "config order"
        return {name: i for i, name in enumerate(names)}

    def _named_indices(self, kind, names):
        """Indices from '<name>__<index>' names, or None to fall back to config order.

        Like the real backend, a name with '__' but no digits after it logs a warning;
        a name without '__' falls back silently.
        """
        indices = []
        for name in names:
            first = name.find("__")
            if first < 0:
                return None
            suffix = name[first + 2 :]
            if not suffix.isdigit():
                model = self.config.model_name
                if kind == "input":
                    text = (
                        f"input '{name}' or previous input(s) are neither an input argument to "
                        f"the model '{model}' nor do they follow the <name>__<index> naming "
                        "convention. Falling back to enforcing strict ordering from model "
                        "configuration."
                    )
                else:
                    text = (
                        f"output '{name}' or previous output(s) of the model '{model}' do not "
                        "follow the <name>__<index> naming convention. Falling back to "
                        "enforcing strict ordering from model configuration."
                    )
                pb_utils.Logger.log_warn(text)
                return None
            indices.append(int(suffix))
        return indices

    # Execution ----------------------------------------------------------------------
    def execute(self, requests):
        try:
            per_request = self._run(requests)
        except InvalidArgument as exc:
            return error_responses(pb_utils, requests, str(exc), pb_utils.TritonError.INVALID_ARG)
        except Exception as exc:  # one error response per request, never a crash
            return error_responses(pb_utils, requests, str(exc))
        finally:
            # print() inside TorchScript writes to this process's sys.stdout, which is the
            # server log but buffered; in the container it goes straight to the server's stdout.
            sys.stdout.flush()
        return responses(pb_utils, per_request)

    def _run(self, requests):
        torch, config = self.torch, self.config
        arrays, sizes = gather_inputs(pb_utils, requests, config)
        arguments = [None] * len(config.inputs)
        for io, position in zip(config.inputs, self.input_order):
            arguments[position] = torch.from_numpy(arrays[io.name]).to(self.device)
        total = sum(sizes)
        if config.max_batch_size > 0 and total > config.max_batch_size:
            raise RuntimeError(
                f"batch size {total} for '{config.model_name}', max allowed is {config.max_batch_size}"
            )
        grad_mode = torch.inference_mode() if self.inference_mode else torch.no_grad()
        try:
            with grad_mode, torch.jit.optimized_execution(self.optimized_execution):
                result = self.model(*arguments)
            returned = self._returned(result)
        except Exception as exc:  # Execute(): one INTERNAL error for anything thrown here
            raise RuntimeError(f"PyTorch execute failure: {exc}") from exc
        outputs = self._outputs(returned)
        return split_outputs(outputs, sizes, config)

    def _returned(self, result):
        """The backend's checks of what ``forward`` returned, in its order (r24.10
        ``ModelInstanceState::Execute``): a list anywhere names its element type."""
        torch = self.torch
        if isinstance(result, torch.Tensor):
            return [result]
        if isinstance(result, list):
            raise ValueError("output must be of type Tensor or List[str], received "
                             f"List[{_element_type(result, torch)}]")
        if isinstance(result, tuple):
            for index, element in enumerate(result):
                if isinstance(element, list):
                    raise ValueError(f"output at index {index} must be of type Tensor or "
                                     f"List[str], received List[{_element_type(element, torch)}]")
            if all(isinstance(r, torch.Tensor) for r in result):
                return list(result)
            # Another kind inside the tuple fails in c10's toTensor(), with its own text.
        raise ValueError(
            "output must be of type Tensor, List[str] or Tuple containing one of these "
            "two types. It should not be a List / Dictionary of Tensors or a Scalar"
        )

    def _outputs(self, returned):
        """ReadOutputTensors: a config that does not fit the outputs is INVALID_ARG there."""
        config = self.config
        outputs = {}
        for io in config.outputs:
            index = self.output_index[io.name]
            if index >= len(returned):
                raise InvalidArgument(
                    f"The output {io.name} in the model configuration refers to an output "
                    f"index which doesn't exist. This model has {len(returned)} outputs"
                )
            tensor = returned[index]
            if tensor.dim() == 0:
                raise InvalidArgument(f"output '{io.name}' is a scalar which is not supported.")
            array = tensor.detach().cpu().numpy()
            if array.dtype != np.dtype(io.dtype):
                raise InvalidArgument(
                    f"configuration expects datatype {io.triton_type} for output "
                    f"'{io.name}', model provides {triton_type_of(array.dtype)}"
                )
            outputs[io.name] = array
        return outputs


def _element_type(values: list, torch) -> str:
    """TorchScript's name for a returned list's element type, as the backend prints it.
    The stand-in refuses string outputs at load, so a List[str] never gets here."""
    kinds = {torch.Tensor: "Tensor", bool: "bool", int: "int", float: "float", str: "str"}
    for kind, name in kinds.items():
        if values and all(isinstance(v, kind) for v in values):
            return name
    return "Tensor"  # an empty list: TorchScript's default element type
