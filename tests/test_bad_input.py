"""Bad requests get Triton's error, never a hang or a crash; the server stays healthy."""

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from conftest import wait_until_ready
from tritonbook.client import infer

# Each affine model: (input name, output name); all take FP32 [batch<=8, 4].
MODELS = {
    "affine_python": ("INPUT__0", "OUTPUT__0"),
    "affine_torchscript": ("input__0", "output__0"),
    "affine_onnx": ("x", "y"),
}
GOOD = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def triton(book_server):
    for model in MODELS:
        book_server.load(model)
    wait_until_ready(book_server)
    yield book_server
    for model in MODELS:
        book_server.unload(model)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", MODELS)
def test_good_request(triton, model, protocol):
    name_in, name_out = MODELS[model]
    out = infer(triton, model, {name_in: GOOD}, [name_out], protocol)
    np.testing.assert_array_equal(out[name_out], 2 * GOOD + 1)


CASES = {
    "wrong input name": (lambda n: {"nope": GOOD}, "unexpected inference input 'nope'"),
    "wrong dtype": (lambda n: {n: GOOD.astype(np.float64)}, "data-type is 'FP64', but model"),
    "wrong shape": (lambda n: {n: np.zeros((2, 5), np.float32)}, "unexpected shape for input"),
    "batch over the limit": (lambda n: {n: np.zeros((9, 4), np.float32)}, "batch-size must be <= 8"),
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("model", MODELS)
def test_bad_request_is_refused_and_the_server_stays_healthy(triton, model, case, protocol):
    name_in, name_out = MODELS[model]
    make_inputs, expected = CASES[case]
    with pytest.raises(InferenceServerException) as caught:
        infer(triton, model, make_inputs(name_in), [name_out], protocol)
    assert expected in caught.value.message()
    assert triton.is_ready() and triton.model_ready(model)
    out = infer(triton, model, {name_in: GOOD}, [name_out], protocol)
    np.testing.assert_array_equal(out[name_out], 2 * GOOD + 1)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_missing_model(triton, protocol):
    with pytest.raises(InferenceServerException) as caught:
        infer(triton, "no_such_model", {"x": GOOD}, ["y"], protocol)
    assert "no_such_model" in caught.value.message()
    assert triton.is_ready()
