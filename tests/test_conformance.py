"""The stand-ins held to the real backends' contract (see conformance.py).

Runs against the embedded server and its stand-ins, or, with TRITON_URL set when pytest
starts, against that server (the NGC container):

    TRITON_URL=127.0.0.1:8000 .venv/bin/python -m pytest tests/test_conformance.py
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import conformance as c
from conftest import CONFORMANCE_URL
from tritonbook import server

FP32, INT64 = TensorProto.FLOAT, TensorProto.INT64
ORT = "onnxruntime_onnx"
ORT_SRC = "onnxruntime_backend r24.10 src/onnxruntime.cc"
QA_AUTOFILL = "server qa/L0_model_config/autofill_noplatform"

# ONNX models ------------------------------------------------------------------------------
# Two inputs with a dynamic batch dimension: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
# (the qa fixture's shape, in float32).
ADD_SUB = c.onnx_graph(
    [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
     helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
    [("INPUT0", FP32, ["batch", 16]), ("INPUT1", FP32, ["batch", 16])],
    [("OUTPUT0", FP32, ["batch", 16]), ("OUTPUT1", FP32, ["batch", 16])],
)
# One input with a dynamic batch dimension: OUTPUT = -INPUT (a new user's first model: one
# tensor in, one out).
NEGATE = c.onnx_graph(
    [helper.make_node("Neg", ["INPUT"], ["OUTPUT"])],
    [("INPUT", FP32, ["batch", 16])],
    [("OUTPUT", FP32, ["batch", 16])],
)
# The same graph exported with a fixed batch of 1, as torch.onnx.export does without
# dynamic axes.
ADD_SUB_FIXED = c.onnx_graph(
    [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
     helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
    [("INPUT0", FP32, [1, 16]), ("INPUT1", FP32, [1, 16])],
    [("OUTPUT0", FP32, [1, 16]), ("OUTPUT1", FP32, [1, 16])],
)
# OUTPUT = INPUT + INITIALIZER, where INITIALIZER is a graph input with a stored value (ones):
# an input a request may leave out.
ADD_INITIALIZER = c.onnx_graph(
    [helper.make_node("Add", ["INPUT", "INITIALIZER"], ["OUTPUT"])],
    [("INPUT", FP32, [1, 16]), ("INITIALIZER", FP32, [1, 16])],
    [("OUTPUT", FP32, [1, 16])],
    initializers=[numpy_helper.from_array(np.ones((1, 16), np.float32), "INITIALIZER")],
)


def ort_io(name, dims=(16,), data_type="TYPE_FP32", **extra):
    return c.io_spec(name, data_type, dims, **extra)


BOTH_IN = [ort_io("INPUT0"), ort_io("INPUT1")]
BOTH_OUT = [ort_io("OUTPUT0"), ort_io("OUTPUT1")]
X = np.arange(32, dtype=np.float32).reshape(2, 16)
Y = np.full((2, 16), 3, dtype=np.float32)
ONE = np.arange(16, dtype=np.float32).reshape(1, 16)

ONNX_CASES = [
    c.Case("ort_batched", f"{ORT_SRC} ValidateInputs/ValidateOutputs; qa L0_model_config cpu_instance",
           ADD_SUB, c.config(ORT, BOTH_IN, BOTH_OUT, max_batch_size=8),
           inputs={"INPUT0": X, "INPUT1": Y}, expected={"OUTPUT0": X + Y, "OUTPUT1": X - Y}),
    c.Case("ort_outputs_subset", f"{ORT_SRC} ValidateOutputs: no output count check",
           ADD_SUB, c.config(ORT, BOTH_IN, [ort_io("OUTPUT1")], max_batch_size=8),
           inputs={"INPUT0": X, "INPUT1": Y}, expected={"OUTPUT1": X - Y}),
    c.Case("ort_autocomplete", f"{QA_AUTOFILL}_success/onnx/no_config; {ORT_SRC} AutoCompleteMaxBatch",
           ADD_SUB, {"platform": ORT, "instance_group": [{"kind": "KIND_CPU", "count": 1}]},
           served={"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [4]}},
           served_io={"input": {"INPUT0": ("TYPE_FP32", [16]), "INPUT1": ("TYPE_FP32", [16])},
                      "output": {"OUTPUT0": ("TYPE_FP32", [16]), "OUTPUT1": ("TYPE_FP32", [16])}},
           inputs={"INPUT0": X, "INPUT1": Y}, expected={"OUTPUT0": X + Y}),
    # A folder's config.pbtxt with nothing but the platform and a KIND_CPU group, as a new
    # user writes it: the container fills in the one input and output (issue 56).
    c.Case("ort_autocomplete_one_input", f"{QA_AUTOFILL}_success/onnx/no_config; {ORT_SRC} AutoCompleteConfig",
           NEGATE, {"platform": ORT, "instance_group": [{"kind": "KIND_CPU", "count": 1}]},
           served={"max_batch_size": 4},
           served_io={"input": {"INPUT": ("TYPE_FP32", [16])},
                      "output": {"OUTPUT": ("TYPE_FP32", [16])}},
           inputs={"INPUT": X}, expected={"OUTPUT": -X}),
    c.Case("ort_autocomplete_no_batch", f"{QA_AUTOFILL}_success/onnx/no_config_no_batch",
           ADD_SUB_FIXED, {"platform": ORT, "instance_group": [{"kind": "KIND_CPU", "count": 1}]},
           served={"max_batch_size": 0},
           served_io={"input": {"INPUT0": ("TYPE_FP32", [1, 16]), "INPUT1": ("TYPE_FP32", [1, 16])},
                      "output": {"OUTPUT0": ("TYPE_FP32", [1, 16]), "OUTPUT1": ("TYPE_FP32", [1, 16])}},
           inputs={"INPUT0": ONE, "INPUT1": ONE}, expected={"OUTPUT0": 2 * ONE}),
    c.Case("ort_autocomplete_refuses_batching", f"{QA_AUTOFILL}/onnx/bad_max_batch_size",
           ADD_SUB_FIXED, c.config(ORT, BOTH_IN, [], max_batch_size=1),
           load_error="autofill failed for model 'ort_autocomplete_refuses_batching': model does not "
                      "support batching while non-zero max_batch_size is specified"),
    c.Case("ort_fixed_batch", "onnxruntime_backend r24.10 src/onnxruntime_utils.cc CompareDimsSupported",
           ADD_SUB_FIXED, c.config(ORT, BOTH_IN, BOTH_OUT, max_batch_size=8),
           load_error="model 'ort_fixed_batch', tensor 'INPUT0': for the model to support batching the "
                      "shape should have at least 1 dimension and the first dimension must be -1; but "
                      "shape expected by the model is [1,16]"),
    c.Case("ort_bad_input_dims", f"{QA_AUTOFILL}/onnx/bad_input_dims",
           ADD_SUB, c.config(ORT, [ort_io("INPUT0", (16, 1)), ort_io("INPUT1")], BOTH_OUT, max_batch_size=1),
           load_error="model 'ort_bad_input_dims', tensor 'INPUT0': the model expects 2 dimensions (shape "
                      "[-1,16]) but the model configuration specifies 3 dimensions (an initial batch "
                      "dimension because max_batch_size > 0 followed by the explicit tensor shape, "
                      "making complete shape [-1,16,1])"),
    c.Case("ort_bad_output_dims", f"{QA_AUTOFILL}/onnx/bad_output_dims",
           ADD_SUB, c.config(ORT, BOTH_IN, [ort_io("OUTPUT0"), ort_io("OUTPUT1", (1,))], max_batch_size=1),
           load_error="tensor 'OUTPUT1': the model expects 2 dimensions (shape [-1,16]) but the model "
                      "configuration specifies 2 dimensions (an initial batch dimension because "
                      "max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,1])"),
    c.Case("ort_too_few_inputs", f"{QA_AUTOFILL}/onnx/too_few_inputs",
           ADD_SUB, c.config(ORT, [ort_io("INPUT1")], BOTH_OUT, max_batch_size=8),
           load_error="unable to load model 'ort_too_few_inputs', configuration expects 1 inputs, "
                      "model provides 2"),
    c.Case("ort_too_many_inputs", f"{QA_AUTOFILL}/onnx/too_many_inputs",
           ADD_SUB, c.config(ORT, [*BOTH_IN, ort_io("INPUT_EXTRA")], BOTH_OUT, max_batch_size=8),
           load_error="configuration expects 3 inputs, model provides 2"),
    c.Case("ort_unknown_input", f"{QA_AUTOFILL}/onnx/unknown_input",
           ADD_SUB, c.config(ORT, [ort_io("INPUT0"), ort_io("INPUT_UNKNOWN")], BOTH_OUT, max_batch_size=8),
           load_error="unexpected inference input 'INPUT_UNKNOWN', allowed inputs are: INPUT0, INPUT1"),
    c.Case("ort_unknown_output", f"{QA_AUTOFILL}/onnx/unknown_output",
           ADD_SUB, c.config(ORT, BOTH_IN, [ort_io("OUTPUT_UNKNOWN")], max_batch_size=8),
           load_error="unexpected inference output 'OUTPUT_UNKNOWN', allowed outputs are: OUTPUT0, OUTPUT1"),
    c.Case("ort_wrong_dtype", f"{ORT_SRC} ValidateInputs (datatype check)",
           ADD_SUB, c.config(ORT, [ort_io("INPUT0", data_type="TYPE_FP64"), ort_io("INPUT1")], BOTH_OUT,
                             max_batch_size=8),
           load_error="unable to load model 'ort_wrong_dtype', configuration expects datatype TYPE_FP64 "
                      "for input 'INPUT0', model provides TYPE_FP32"),
    c.Case("ort_initializer_left_out", "server qa/L0_initializer_as_input (r24.10: test/initializer_as_input)",
           ADD_INITIALIZER,
           c.config(ORT, [ort_io("INPUT", (1, 16)), ort_io("INITIALIZER", (1, 16), optional=True)],
                    [ort_io("OUTPUT", (1, 16))]),
           inputs={"INPUT": ONE}, expected={"OUTPUT": ONE + 1}),
    c.Case("ort_initializer_given", "server qa/L0_initializer_as_input (r24.10: test/initializer_as_input)",
           ADD_INITIALIZER,
           c.config(ORT, [ort_io("INPUT", (1, 16)), ort_io("INITIALIZER", (1, 16), optional=True)],
                    [ort_io("OUTPUT", (1, 16))]),
           inputs={"INPUT": ONE, "INITIALIZER": 10 * ONE}, expected={"OUTPUT": 11 * ONE}),
    c.Case("ort_optional_with_batching", f"{ORT_SRC} ValidateInputs (optional inputs)",
           ADD_INITIALIZER,
           # Inputs are checked in config order: the optional one first.
           c.config(ORT, [ort_io("INITIALIZER", (16,), optional=True), ort_io("INPUT", (16,))],
                    [ort_io("OUTPUT", (16,))], max_batch_size=4),
           load_error="unable to load model 'ort_optional_with_batching', optional input 'INITIALIZER' is "
                      "not supported for models that support batching"),
    c.Case("ort_bad_execution_mode", f"{ORT_SRC} ModelState (execution_mode parameter)",
           ADD_SUB, c.config(ORT, BOTH_IN, BOTH_OUT, max_batch_size=8,
                             parameters={"execution_mode": {"string_value": "2"}}),
           load_error="Expected values for  execution_mode are 0 or 1 but got 2 ."),
]

# libtorch (TorchScript) ------------------------------------------------------------------
PT = "pytorch_libtorch"
PT_SRC = "pytorch_backend src/libtorch.cc (main: src/pt/model_instance_state.cc)"
PT_SRC_STATE = "pytorch_backend src/pt/model_state.cc"


class ScaleThenShift(torch.nn.Module):
    """Two inputs whose order matters: image * scale + 1."""

    def forward(self, image: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return image * scale + 1


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class TwoOutputs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x + 1, x * 10


class ScalarOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


class ListOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return [x, x]


class DictOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"out": x}


class ListInTupleOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        return x, [x]


class Printer(torch.nn.Module):
    """print() inside TorchScript: the container writes it to the server's stdout (its log)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("conformance: TorchScript print of a batch of", x.size(0))
        return x


class DictInput(torch.nn.Module):
    """One Dict(str, Tensor) argument: the config's inputs are its keys."""

    def forward(self, x: Dict[str, torch.Tensor]) -> torch.Tensor:
        return x["image"] * x["scale"]


class WithStart(torch.nn.Module):
    """A sequence model: the START control arrives as one more argument."""

    def forward(self, x: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        return x + start


SCALE_THEN_SHIFT, IDENTITY, TWO_OUTPUTS, SCALAR_OUTPUT, LIST_OUTPUT, PRINTER, WITH_START, DICT_INPUT = (
    c.torchscript(m) for m in (ScaleThenShift(), Identity(), TwoOutputs(), ScalarOutput(), ListOutput(),
                               Printer(), WithStart(), DictInput()))
DICT_OUTPUT, LIST_IN_TUPLE_OUTPUT = (c.torchscript(m) for m in (DictOutput(), ListInTupleOutput()))


def pt_io(name, data_type="TYPE_FP32", dims=(3,), **extra):
    return c.io_spec(name, data_type, dims, **extra)


IMG = np.arange(6, dtype=np.float32).reshape(2, 3)
SCL = np.full((2, 3), 10, dtype=np.float32)
OUT0 = [pt_io("OUTPUT__0")]
PT_CASES = [
    c.Case("pt_forward_names", "server qa/L0_libtorch_io_names (forward() argument names)", SCALE_THEN_SHIFT,
           c.config(PT, [pt_io("scale"), pt_io("image")], OUT0, max_batch_size=4),
           inputs={"image": IMG, "scale": SCL}, expected={"OUTPUT__0": IMG * SCL + 1}),
    c.Case("pt_named_index", "server qa/L0_libtorch_io_names (<name>__<index>)", SCALE_THEN_SHIFT,
           c.config(PT, [pt_io("INPUT__1"), pt_io("INPUT__0")], OUT0, max_batch_size=4),
           inputs={"INPUT__0": IMG, "INPUT__1": SCL}, expected={"OUTPUT__0": IMG * SCL + 1}),
    c.Case("pt_config_order", "server qa/L0_libtorch_io_names (strict config order)", SCALE_THEN_SHIFT,
           c.config(PT, [pt_io("first"), pt_io("second")], OUT0, max_batch_size=4),
           inputs={"first": IMG, "second": SCL}, expected={"OUTPUT__0": IMG * SCL + 1}),
    c.Case("pt_outputs_by_index", f"{PT_SRC} ValidateOutputs (NAMED_INDEX)", TWO_OUTPUTS,
           c.config(PT, [pt_io("INPUT__0")], [pt_io("OUTPUT__1"), pt_io("OUTPUT__0")], max_batch_size=4),
           inputs={"INPUT__0": IMG}, expected={"OUTPUT__0": IMG + 1, "OUTPUT__1": IMG * 10}),
    c.Case("pt_input_count", f"{PT_SRC} ValidateInputs (input count)", IDENTITY,
           c.config(PT, [pt_io("INPUT__0"), pt_io("INPUT__1")], OUT0, max_batch_size=4),
           load_error="unable to load model 'pt_input_count', configuration expects 2 inputs, model provides 1"),
    *[c.Case(f"pt_{kind.lower()}", f"{PT_SRC} ValidateInputs (ModelConfigDataTypeToTorchType)", IDENTITY,
             c.config(PT, [pt_io("INPUT__0", f"TYPE_{kind}")], [pt_io("OUTPUT__0", f"TYPE_{kind}")],
                      max_batch_size=4),
             load_error=f"unsupported datatype TYPE_{kind} for input 'INPUT__0' for model 'pt_{kind.lower()}'",
             load_status="Internal")
      for kind in ("UINT16", "UINT32", "UINT64")],
    c.Case("pt_optional_input", "backend r24.10 src/backend_model.cc (allow_optional is false for libtorch)",
           IDENTITY, c.config(PT, [pt_io("INPUT__0", optional=True)], OUT0, max_batch_size=4),
           load_error="'optional' is set to true for input 'INPUT__0' while the backend model doesn't "
                      "support optional input"),
    c.Case("pt_bad_boolean", "backend r24.10 src/backend_common.cc ParseBoolValue", IDENTITY,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4,
                    parameters={"INFERENCE_MODE": {"string_value": "maybe"}}),
           load_error="failed to convert 'maybe' to boolean"),
    c.Case("pt_parameters_logged", f"{PT_SRC} ModelState::ParseParameters (INFO lines)", IDENTITY,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4,
                    parameters={"DISABLE_OPTIMIZED_EXECUTION": {"string_value": "true"}}),
           inputs={"INPUT__0": IMG}, expected={"OUTPUT__0": IMG},
           log=["Optimized execution is disabled for model instance 'pt_parameters_logged'",
                "Inference Mode is enabled for model instance 'pt_parameters_logged'"]),
    c.Case("pt_all_parameters_logged", f"{PT_SRC_STATE} ParseParameters (INFO lines, in order)", IDENTITY,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4,
                    parameters={key: {"string_value": value} for key, value in (
                        ("DISABLE_CUDNN", "true"), ("ENABLE_TENSOR_FUSER", "false"),
                        ("ENABLE_WEIGHT_SHARING", "false"), ("ENABLE_JIT_PROFILING", "false"),
                        ("ENABLE_JIT_EXECUTOR", "true"))}),
           inputs={"INPUT__0": IMG}, expected={"OUTPUT__0": IMG},
           log=[f"{label} for model instance 'pt_all_parameters_logged'" for label in (
               "Optimized execution is enabled", "Cache Cleaning is disabled", "Inference Mode is enabled",
               "cuDNN is disabled", "Tensor fuser is disabled", "Weight sharing is disabled",
               "Jit profiling is disabled", "Jit executor is enabled")]),
    c.Case("pt_no_outputs", f"{PT_SRC} ValidateOutputs (no outputs)", IDENTITY,
           c.config(PT, [pt_io("INPUT__0")], [], max_batch_size=4),
           load_error="model configuration must contain at least one output, none were specified.",
           load_status="Internal"),
    c.Case("pt_missing_output_index", f"{PT_SRC} ReadOutputTensors (output index)", TWO_OUTPUTS,
           c.config(PT, [pt_io("INPUT__0")], [pt_io("OUTPUT__0"), pt_io("OUTPUT__2")], max_batch_size=4),
           inputs={"INPUT__0": IMG},
           infer_error=(400, "The output OUTPUT__2 in the model configuration refers to an output index "
                             "which doesn't exist. This model has 2 outputs")),
    c.Case("pt_output_dtype", f"server qa/L0_libtorch_output_validation; {PT_SRC} SetOutputTensors", IDENTITY,
           c.config(PT, [pt_io("INPUT__0")], [pt_io("OUTPUT__0", "TYPE_INT32")], max_batch_size=4),
           inputs={"INPUT__0": IMG},
           infer_error=(400, "configuration expects datatype TYPE_INT32 for output 'OUTPUT__0', "
                             "model provides TYPE_FP32")),
    c.Case("pt_scalar_output", f"{PT_SRC} SetOutputTensors (scalar)", SCALAR_OUTPUT,
           c.config(PT, [pt_io("INPUT__0")], [pt_io("OUTPUT__0", dims=(1,))]),
           inputs={"INPUT__0": np.ones(3, np.float32)},
           infer_error=(400, "output 'OUTPUT__0' is a scalar which is not supported.")),
    c.Case("pt_list_of_tensors", f"{PT_SRC} Execute (output kinds)", LIST_OUTPUT,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4),
           inputs={"INPUT__0": IMG},
           infer_error=(500, "PyTorch execute failure: output must be of type Tensor or List[str], "
                             "received List[Tensor]")),
    c.Case("pt_list_in_tuple", f"{PT_SRC} Execute (output kinds)", LIST_IN_TUPLE_OUTPUT,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4),
           inputs={"INPUT__0": IMG},
           infer_error=(500, "PyTorch execute failure: output at index 1 must be of type Tensor or "
                             "List[str], received List[Tensor]")),
    c.Case("pt_dict_output", f"{PT_SRC} Execute (output kinds)", DICT_OUTPUT,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4),
           inputs={"INPUT__0": IMG},
           infer_error=(500, "PyTorch execute failure: output must be of type Tensor, List[str] or Tuple "
                             "containing one of these two types. It should not be a List / Dictionary of "
                             "Tensors or a Scalar")),
    c.Case("pt_print_in_log", "TorchScript print() writes to the server's stdout", PRINTER,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4),
           inputs={"INPUT__0": IMG}, expected={"OUTPUT__0": IMG},
           log=["conformance: TorchScript print of a batch of 2"]),
    c.Case("pt_dict_input", f"{PT_SRC} ValidateInputs (a single Dict(str, Tensor) input)", DICT_INPUT,
           c.config(PT, [pt_io("scale"), pt_io("image")], OUT0, max_batch_size=4),
           inputs={"image": IMG, "scale": SCL}, expected={"OUTPUT__0": IMG * SCL},
           standin_load_error="does not serve a Dict(str, Tensor) input"),
    c.Case("pt_sequence_start", f"{PT_SRC} ValidateBooleanSequenceControl; server core sequence_batch_scheduler",
           WITH_START,
           c.config(PT, [pt_io("INPUT__0")], OUT0, max_batch_size=4,
                    sequence_batching={"control_input": [{"name": "START__1", "control": [
                        {"kind": "CONTROL_SEQUENCE_START", "fp32_false_true": [0, 1]}]}]}),
           # Loaded: the sequence batcher then refuses a request without a correlation ID.
           inputs={"INPUT__0": IMG},
           infer_error=(400, "inference request to model 'pt_sequence_start' must specify a non-zero or "
                             "non-empty correlation ID"),
           standin_load_error="does not serve sequence_batching"),
]


# torch_aoti -------------------------------------------------------------------------------
AOTI = "torch_aoti"
AOTI_SRC = "pytorch_backend README (torch_aoti, 26.05+ naming)"


def aoti_package() -> bytes:
    """(x, y) -> (2x + y, row sums of x), compiled with a dynamic batch dimension."""
    import os
    import tempfile

    import torch

    class TwoInTwoOut(torch.nn.Module):
        def forward(self, x, y):
            return 2 * x + y, x.sum(dim=1, keepdim=True)

    example = (torch.ones(2, 3), torch.ones(2, 3))
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(TwoInTwoOut(), example, dynamic_shapes=({0: batch}, {0: batch}))
    with tempfile.TemporaryDirectory() as folder:
        path = torch._inductor.aoti_compile_and_package(program, package_path=os.path.join(folder, "m.pt2"))
        with open(path, "rb") as f:
            return f.read()


A3 = np.arange(6, dtype=np.float32).reshape(2, 3)
B3 = np.ones((2, 3), dtype=np.float32)
AOTI_CASES = [
    c.Case("aoti_batched", AOTI_SRC, aoti_package,
           c.config(AOTI, [c.io_spec("INPUT__0", "TYPE_FP32", [3]), c.io_spec("INPUT__1", "TYPE_FP32", [3])],
                    [c.io_spec("OUTPUT__0", "TYPE_FP32", [3]), c.io_spec("OUTPUT__1", "TYPE_FP32", [1])],
                    max_batch_size=8),
           inputs={"INPUT__0": A3, "INPUT__1": B3},
           expected={"OUTPUT__0": 2 * A3 + B3, "OUTPUT__1": A3.sum(axis=1, keepdims=True)},
           log=["tritonbook loaded this model with a config override that adds backend 'torch_aoti_standin'"]),
    c.Case("aoti_forward_names", "pytorch_backend README (torch_aoti, forward-based names ARGS[i] / RESULT[i])",
           aoti_package,
           c.config(AOTI, [c.io_spec("ARGS[1]", "TYPE_FP32", [3]), c.io_spec("ARGS[0]", "TYPE_FP32", [3])],
                    [c.io_spec("RESULT[1]", "TYPE_FP32", [1]), c.io_spec("RESULT[0]", "TYPE_FP32", [3])],
                    max_batch_size=8),
           inputs={"ARGS[0]": A3, "ARGS[1]": B3},
           expected={"RESULT[0]": 2 * A3 + B3, "RESULT[1]": A3.sum(axis=1, keepdims=True)}),
]

CASES = ONNX_CASES + PT_CASES + AOTI_CASES


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    """The server under test: TRITON_URL's, or an embedded one on an empty repository,
    with config auto-complete on, as the container runs by default."""
    if CONFORMANCE_URL:
        yield server.remote_from_environment({"TRITON_URL": CONFORMANCE_URL})
        return
    with server.EmbeddedTriton(tmp_path_factory.mktemp("conformance"),
                               auto_complete=True) as embedded:
        yield embedded


MODEL_BYTES: dict = {}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_backend_contract(triton, case):
    builder = case.model
    if builder not in MODEL_BYTES:
        MODEL_BYTES[builder] = builder()
    c.run(triton, case, MODEL_BYTES[builder])


def test_every_case_names_its_source_and_one_answer():
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert case.source.strip()
        assert (case.load_error is None) != (case.inputs is None), case.name
        assert case.expected is not None or case.infer_error is not None or case.load_error, case.name


def test_book_server_leaves_configs_as_written(tmp_path):
    """The book's embedded server starts with auto-complete off: the config the
    container would complete (ort_autocomplete, ort_autocomplete_one_input) is refused, with the real backend's
    message for a config that lists fewer inputs than the model has."""
    if CONFORMANCE_URL:
        pytest.skip("the server behind TRITON_URL was started with its own flags")
    with server.EmbeddedTriton(tmp_path) as embedded:
        assert "--disable-auto-complete-config" in embedded.command
        # The troubleshooting page's entry: a new user's folder, one input or two.
        for name, model, inputs in [("ort_autocomplete", ADD_SUB, 2),
                                    ("ort_autocomplete_one_input", NEGATE, 1)]:
            case = next(case for case in ONNX_CASES if case.name == name)
            with pytest.raises(server.TritonServerError) as refused:
                embedded.load(case.name, config=dict(case.config, name=case.name),
                              files={"file:1/model.onnx": model()})
            assert (f"configuration expects 0 inputs, model provides {inputs}"
                    in refused.value.reason)
            assert embedded.is_live()
