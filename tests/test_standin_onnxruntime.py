"""The onnxruntime stand-in serves model.onnx by input and output names."""

import concurrent.futures

import numpy as np
import pytest
from onnx import TensorProto, helper, save

from tritonbook.client import infer
from tritonbook.server import TritonServerError
from conftest import write_model


def subtract_model(path):
    """out = a - b: the order of the two inputs matters."""
    graph = helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["difference"])],
        "subtract",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 3]) for n in ("a", "b")],
        [helper.make_tensor_value_info("difference", TensorProto.FLOAT, ["batch", 3])],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def config(inputs=("b", "a"), output="difference", dtype="TYPE_FP32", batch=8, extra=""):
    ins = ", ".join(f'{{ name: "{n}", data_type: {dtype}, dims: [ 3 ] }}' for n in inputs)
    return f"""
    platform: "onnxruntime_onnx"
    max_batch_size: {batch}
    input [ {ins} ]
    output [ {{ name: "{output}", data_type: TYPE_FP32, dims: [ 3 ] }} ]
    instance_group [ {{ kind: KIND_CPU }} ]
    {extra}
    """


@pytest.fixture
def loaded(scratch_server, scratch_repository):
    names = []

    def load(name, text, with_file=True):
        write_model(scratch_repository, name, text, {"1/model.onnx": subtract_model} if with_file else None)
        names.append(name)
        scratch_server.load(name)

    yield load
    for name in names:
        scratch_server.unload(name)
    # A failed load leaves the server not ready (strict readiness) but alive.
    assert scratch_server.is_live()


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.ones((2, 3), dtype=np.float32)


def test_inputs_are_matched_by_name_not_order(scratch_server, loaded):
    loaded("onnx_subtract", config(extra="dynamic_batching { max_queue_delay_microseconds: 200000 }"))
    for protocol in ("http", "grpc"):
        out = infer(scratch_server, "onnx_subtract", {"b": B, "a": A}, ["difference"], protocol)
        np.testing.assert_array_equal(out["difference"], A - B)
    # Concurrent requests are batched together and split back.
    pairs = [(A * i, B) for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: infer(scratch_server, "onnx_subtract", {"a": p[0], "b": p[1]},
                                                ["difference"]), pairs))
    for (a, b), out in zip(pairs, results):
        np.testing.assert_array_equal(out["difference"], a - b)
    assert "the 'onnxruntime' backend" in scratch_server.log()
    assert "Providers: CPUExecutionProvider" in scratch_server.log()


def test_an_unknown_input_name_fails_the_load(scratch_server, loaded):
    with pytest.raises(TritonServerError, match="unexpected inference input 'c', allowed inputs are: a, b"):
        loaded("onnx_bad_name", config(inputs=("a", "c")))
    # Strict readiness: a model that failed to load makes the server "not ready" (a
    # readiness probe would take it out of service) until a load of it succeeds.
    assert scratch_server.is_live() and not scratch_server.is_ready()


def test_an_unknown_output_name_fails_the_load(scratch_server, loaded):
    with pytest.raises(TritonServerError, match="unexpected inference output 'diff', allowed outputs are: difference"):
        loaded("onnx_bad_output", config(output="diff"))


def test_a_wrong_datatype_fails_the_load(scratch_server, loaded):
    with pytest.raises(TritonServerError, match="unexpected datatype TYPE_FP64 for 'b', model provides TYPE_FP32"):
        loaded("onnx_bad_type", config(dtype="TYPE_FP64"))


def test_an_input_count_mismatch_fails_the_load(scratch_server, loaded):
    with pytest.raises(TritonServerError, match="configuration expects 1 inputs, model provides 2"):
        loaded("onnx_count", config(inputs=("a",)))


def test_a_missing_file_fails_the_load(scratch_server, loaded):
    with pytest.raises(TritonServerError, match=r"unable to find '.*onnx_no_file/1/model.onnx'"):
        loaded("onnx_no_file", config(), with_file=False)
