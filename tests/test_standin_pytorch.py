"""The pytorch stand-in follows the libtorch backend's contract (FACTS.md §2)."""

import concurrent.futures
import time
from typing import Dict, List, Tuple

import numpy as np
import pytest
import torch
from tritonclient.utils import InferenceServerException

from tritonbook.client import infer
from tritonbook.server import TritonServerError
from conftest import logged, save_torchscript, write_model


class ScaleThenShift(torch.nn.Module):
    """Two inputs whose order matters: image * scale + 1 (scale has one value per row)."""

    def forward(self, image: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return image * scale + 1


class TwoOutputs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x + 1, x * 10


class ReturnsInt(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.long()


class ReturnsScalar(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum()


class ReturnsList(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        return [x, x]


class ReturnsDict(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"out": x}


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def two_input_config(first, second, out="output__0", batch=4):
    return f"""
    platform: "pytorch_libtorch"
    max_batch_size: {batch}
    input [
      {{ name: "{first}", data_type: TYPE_FP32, dims: [ 3 ] }},
      {{ name: "{second}", data_type: TYPE_FP32, dims: [ 3 ] }}
    ]
    output [ {{ name: "{out}", data_type: TYPE_FP32, dims: [ 3 ] }} ]
    instance_group [ {{ kind: KIND_CPU }} ]
    """


def one_input_config(outputs, batch=4, dims="[ 3 ]", extra=""):
    outs = ", ".join(f'{{ name: "{n}", data_type: {t}, dims: {dims} }}' for n, t in outputs)
    return f"""
    platform: "pytorch_libtorch"
    max_batch_size: {batch}
    input [ {{ name: "input__0", data_type: TYPE_FP32, dims: {dims} }} ]
    output [ {outs} ]
    instance_group [ {{ kind: KIND_CPU }} ]
    {extra}
    """


IMAGE = np.arange(6, dtype=np.float32).reshape(2, 3)
SCALE = np.full((2, 3), 10, dtype=np.float32)
EXPECTED = IMAGE * SCALE + 1


@pytest.fixture
def loaded(scratch_server, scratch_repository):
    """Write a model folder, load it, unload it after the test."""
    names = []

    def load(name, config, module=None, files=None):
        files = dict(files or {})
        if module is not None:
            files["1/model.pt"] = save_torchscript(module)
        write_model(scratch_repository, name, config, files)
        names.append(name)
        scratch_server.load(name)
        return name

    yield load
    for name in names:
        scratch_server.unload(name)
    # A failed load leaves the server not ready (strict readiness) but alive.
    assert scratch_server.is_live()


@pytest.mark.parametrize(
    "first, second, convention",
    [
        # (1) forward() argument names, listed in the other order in the config
        ("scale", "image", "forward() argument names"),
        # (2) <name>__<index>, listed in the other order
        ("scale__1", "image__0", "the <name>__<index> convention"),
        ("INPUT__0", "INPUT__1", "the <name>__<index> convention"),
        # (3) neither: strict config order, so image must come first
        ("first", "second", "config order"),
    ],
)
def test_input_naming_precedence(scratch_server, loaded, first, second, convention):
    model = loaded(f"names_{first}_{second}".lower(), two_input_config(first, second), ScaleThenShift())
    feeds = {"image": IMAGE, "scale": SCALE, "image__0": IMAGE, "scale__1": SCALE,
             "INPUT__0": IMAGE, "INPUT__1": SCALE, "first": IMAGE, "second": SCALE}
    for protocol in ("http", "grpc"):
        out = infer(scratch_server, model, {first: feeds[first], second: feeds[second]}, ["output__0"], protocol)
        np.testing.assert_array_equal(out["output__0"], EXPECTED)
    assert logged(scratch_server, f"inputs by {convention}")


def test_a_bad_index_suffix_falls_back_to_config_order_with_the_backends_warning(scratch_server, loaded):
    loaded("names_bad_suffix", two_input_config("image__x", "scale__y"), ScaleThenShift())
    out = infer(scratch_server, "names_bad_suffix", {"image__x": IMAGE, "scale__y": SCALE}, ["output__0"])
    np.testing.assert_array_equal(out["output__0"], EXPECTED)
    assert logged(scratch_server, "input 'image__x' or previous input(s) are neither an input argument to "
                  "the model 'names_bad_suffix' nor do they follow the <name>__<index> naming convention")


def test_outputs_by_index_in_any_config_order(scratch_server, loaded):
    config = one_input_config([("times_ten__1", "TYPE_FP32"), ("plus_one__0", "TYPE_FP32")])
    loaded("two_outputs", config, TwoOutputs())
    x = np.ones((2, 3), dtype=np.float32)
    out = infer(scratch_server, "two_outputs", {"input__0": x}, ["plus_one__0", "times_ten__1"])
    np.testing.assert_array_equal(out["plus_one__0"], x + 1)
    np.testing.assert_array_equal(out["times_ten__1"], x * 10)


def test_dynamic_batching_concatenates_requests_and_splits_outputs(scratch_server, loaded):
    config = one_input_config([("output__0", "TYPE_FP32")], batch=8,
                              extra="dynamic_batching { max_queue_delay_microseconds: 200000 }")
    loaded("batched_identity", config, Identity())
    requests = [np.full((2, 3), i, dtype=np.float32) for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(
            lambda x: infer(scratch_server, "batched_identity", {"input__0": x}, ["output__0"], "grpc"), requests))
    for x, out in zip(requests, results):
        np.testing.assert_array_equal(out["output__0"], x)  # each request got its own rows back
    # Triton records statistics just after it sends the answers (client.request_counts):
    # read until all 8 rows are counted, or 10 s have passed.
    deadline = time.monotonic() + 10
    while True:
        stats = scratch_server.http().get_inference_statistics("batched_identity")["model_stats"][0]
        if int(stats["inference_count"]) >= 8 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert stats["inference_count"] == 8
    assert stats["execution_count"] < 4, "the 200 ms queue delay should have merged requests"


def test_without_batching_shapes_pass_through(scratch_server, loaded):
    loaded("unbatched_identity", one_input_config([("output__0", "TYPE_FP32")], batch=0, dims="[ 1, 2, 3 ]"),
           Identity())
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    out = infer(scratch_server, "unbatched_identity", {"input__0": x}, ["output__0"])
    np.testing.assert_array_equal(out["output__0"], x)


def test_input_count_mismatch_fails_the_load_with_the_backends_text(scratch_server, loaded):
    with pytest.raises(TritonServerError, match=r"unable to load model 'count_mismatch', "
                                                r"configuration expects 2 inputs, model provides 1"):
        loaded("count_mismatch", two_input_config("input__0", "input__1"), Identity())
    assert scratch_server.is_live()


def test_missing_model_file_fails_the_load(scratch_server, loaded):
    with pytest.raises(TritonServerError, match=r"unable to find '.*no_file/1/model.pt' for model instance"):
        loaded("no_file", one_input_config([("output__0", "TYPE_FP32")]))


def test_a_bad_boolean_parameter_fails_the_load(scratch_server, loaded):
    extra = 'parameters { key: "INFERENCE_MODE" value: { string_value: "maybe" } }'
    with pytest.raises(TritonServerError, match="failed to convert 'maybe' to boolean"):
        loaded("bad_parameter", one_input_config([("output__0", "TYPE_FP32")], extra=extra), Identity())


def test_parameters_are_accepted(scratch_server, loaded):
    extra = """parameters [
      { key: "INFERENCE_MODE" value: { string_value: "false" } },
      { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } },
      { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
    ]"""
    loaded("with_parameters", one_input_config([("output__0", "TYPE_FP32")], extra=extra), Identity())
    x = np.ones((1, 3), dtype=np.float32)
    np.testing.assert_array_equal(infer(scratch_server, "with_parameters", {"input__0": x}, ["output__0"])["output__0"], x)


@pytest.mark.parametrize(
    "name, module, outputs, message",
    [
        ("missing_index", TwoOutputs(), [("output__0", "TYPE_FP32"), ("output__2", "TYPE_FP32")],
         "The output output__2 in the model configuration refers to an output index which doesn't exist. "
         "This model has 2 outputs"),
        ("wrong_dtype", ReturnsInt(), [("output__0", "TYPE_FP32")],
         "configuration expects datatype TYPE_FP32 for output 'output__0', model provides TYPE_INT64"),
        ("scalar_output", ReturnsScalar(), [("output__0", "TYPE_FP32")],
         "output 'output__0' is a scalar which is not supported."),
        ("list_output", ReturnsList(), [("output__0", "TYPE_FP32")],
         "output must be of type Tensor or List[str], received List[Tensor]"),
        ("dict_output", ReturnsDict(), [("output__0", "TYPE_FP32")],
         "output must be of type Tensor, List[str] or Tuple containing one of these two types"),
    ],
)
def test_output_mismatches_are_errors_at_inference(scratch_server, loaded, name, module, outputs, message):
    loaded(name, one_input_config(outputs, batch=0, dims="[ 1, 3 ]"), module)
    with pytest.raises(InferenceServerException) as caught:
        infer(scratch_server, name, {"input__0": np.ones((1, 3), dtype=np.float32)}, [outputs[0][0]])
    assert message in caught.value.message()
    assert scratch_server.is_live()


def test_the_load_log_says_it_is_a_stand_in(scratch_server, loaded):
    loaded("announce", one_input_config([("output__0", "TYPE_FP32")]), Identity())
    assert logged(scratch_server, "model 'announce' version 1 (announce_0_0) is served by the book's python "
                  "stand-in for the 'pytorch' backend")
