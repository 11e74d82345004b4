"""tritonbook.srcnn: one state_dict for every variant, mmediting-layout checkpoints, ONNX exports, trained weights."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from tritonbook import srcnn, train_srcnn
from tritonbook.measure import parity
from tritonbook.srcnn import (SRCNN, SRCNNCheckpointError, SRCNNCustomOp, SRCNNFunction, SRCNNItem, SRCNNStatic,
                              load_srcnn_checkpoint, save_srcnn_checkpoint, scales_tensor)

# The SRCNN of the mmdeploy tutorial (9-1-5, 64 and 32 channels), as in the released srcnn.pth.
EXPECTED_SHAPES = {
    "conv1.weight": (64, 3, 9, 9), "conv1.bias": (64,),
    "conv2.weight": (32, 64, 1, 1), "conv2.bias": (32,),
    "conv3.weight": (3, 32, 5, 5), "conv3.bias": (3,),
}
FACTORS = (2.0, 3.0, 4.0, 2.5)

# onnxruntime's cubic Resize against torch's bicubic interpolate, then the three
# convolutions, on pixel values in [0, 255].  Measured max |difference| with the
# multi-scale weights on the whole 256x256 portrait: 2.1e-4 (x2), 3.0e-3 (x3),
# 2.4e-4 (x4), 3.3e-3 (x2.5); on this test's 40x48 crop at most 3.5e-4.  Borders are
# no worse than the middle (both clamp to the edge pixel); the x3 and x2.5 gaps come
# from the Resize alone (2.6e-3 and 2.8e-3 there; exactly 0 at x2): the two compute
# the sampling positions with 1/scale rounded differently, and the error grows with
# the coordinate, so with the image size.  Well under a hundredth of a grey level:
ORT_ATOL = 1e-2
ORT_RTOL = 1e-5


def run_quietly(fn, *args, **kwargs):
    """Call an exporter without its deprecation and tracer warnings (the tests look at the result)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.fixture(scope="module")
def weights() -> dict[str, torch.Tensor]:
    """The book's multi-scale weights if present, else a seeded random SRCNN's."""
    if srcnn.WEIGHTS_MULTISCALE.is_file():
        return load_srcnn_checkpoint(srcnn.WEIGHTS_MULTISCALE, SRCNN()).state_dict()
    torch.manual_seed(0)
    return SRCNN().state_dict()


def build(variant: type[SRCNN], weights: dict[str, torch.Tensor], *args) -> SRCNN:
    model = variant(*args)
    model.load_state_dict(weights, strict=True)
    return model.eval()


@pytest.fixture(scope="module")
def small_image() -> torch.Tensor:
    """A 40x48 crop of the astronaut portrait, NCHW float32 in [0, 255] (BGR)."""
    image = train_srcnn.load_bgr(train_srcnn.HELD_OUT_IMAGE)[60:100, 100:148]
    return srcnn.image_to_tensor(image)


def ort_session(path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# --- architecture and checkpoints --------------------------------------------------

@pytest.mark.parametrize("variant", [SRCNN, *srcnn.VARIANTS.values()])
def test_state_dict_layout(variant):
    model = variant()
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == EXPECTED_SHAPES
    assert isinstance(model.relu, torch.nn.ReLU)


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(1)
    model = SRCNNStatic()
    path = tmp_path / "srcnn.pth"
    save_srcnn_checkpoint(model, path, meta={"note": "test"})

    raw = torch.load(path, map_location="cpu", weights_only=True)
    assert sorted(raw["state_dict"]) == sorted("generator." + k for k in EXPECTED_SHAPES)
    assert raw["meta"] == {"note": "test"}

    loaded = load_srcnn_checkpoint(path, SRCNNFunction())
    assert not loaded.training
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)


def test_checkpoint_any_wrapper_prefix_is_stripped(tmp_path):
    # The tutorial drops the first key component whatever it is (mmediting writes 'generator.').
    torch.manual_seed(2)
    state = SRCNN().state_dict()
    path = tmp_path / "other_prefix.pth"
    torch.save({"state_dict": {"model." + k: v for k, v in state.items()}}, path)
    loaded = load_srcnn_checkpoint(path, SRCNN())
    torch.testing.assert_close(loaded.conv3.weight, state["conv3.weight"], rtol=0, atol=0)


def _write(path, state_dict, wrap=True):
    torch.save({"state_dict": {"generator." + k: v for k, v in state_dict.items()}} if wrap else state_dict, path)
    return path


@pytest.mark.parametrize("damage, message", [
    (lambda sd: sd.pop("conv2.bias"), "missing keys: conv2.bias"),
    (lambda sd: sd.update({"conv4.weight": torch.zeros(1)}), "unexpected keys: conv4.weight"),
    (lambda sd: sd.update({"conv1.weight": torch.zeros(64, 3, 5, 5)}), "conv1.weight: checkpoint (64, 3, 5, 5)"),
])
def test_checkpoint_mismatch_fails_loudly(tmp_path, damage, message):
    state = SRCNN().state_dict()
    damage(state)
    model = SRCNN()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(SRCNNCheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_srcnn_checkpoint(_write(tmp_path / "bad.pth", state), model)
    for key, value in model.state_dict().items():   # nothing was half-loaded
        assert torch.equal(value, before[key])


def test_checkpoint_layout_errors(tmp_path):
    state = SRCNN().state_dict()
    with pytest.raises(SRCNNCheckpointError, match="'state_dict' entry"):
        load_srcnn_checkpoint(_write(tmp_path / "bare.pth", state, wrap=False), SRCNN())
    torch.save({"state_dict": {"conv1": torch.zeros(1)}}, tmp_path / "flat.pth")
    with pytest.raises(SRCNNCheckpointError, match="without a wrapper prefix"):
        load_srcnn_checkpoint(tmp_path / "flat.pth", SRCNN())


# --- the variants compute the same thing -------------------------------------------

@pytest.mark.parametrize("factor", [2, 3, 4])
def test_variants_agree(weights, small_image, factor):
    with torch.no_grad():
        expected = build(SRCNNStatic, weights, factor)(small_image)
        outputs = {
            "refine(bicubic_upscale)": build(SRCNN, weights).refine(srcnn.bicubic_upscale(small_image, factor)),
            "item": build(SRCNNItem, weights)(small_image, torch.tensor(float(factor))),
            "function": build(SRCNNFunction, weights)(small_image, scales_tensor(factor)),
            "custom_op": build(SRCNNCustomOp, weights)(small_image, scales_tensor(factor)),
        }
    assert expected.shape == (1, 3, 40 * factor, 48 * factor)
    for name, output in outputs.items():
        torch.testing.assert_close(output, expected, msg=lambda m, name=name: f"{name}: {m}")


def test_dynamic_variants_take_non_integer_factors(weights, small_image):
    with torch.no_grad():
        a = build(SRCNNFunction, weights)(small_image, scales_tensor(2.5))
        b = build(SRCNNCustomOp, weights)(small_image, scales_tensor(2.5))
    assert a.shape == (1, 3, 100, 120)
    torch.testing.assert_close(a, b)


# --- ONNX ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def legacy_function_onnx(weights, small_image, tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "srcnn_function.onnx"
    run_quietly(torch.onnx.export, build(SRCNNFunction, weights), (small_image, scales_tensor(3)), str(path),
                opset_version=11, dynamo=False, input_names=["input", "factor"], output_names=["output"],
                dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"},
                              "output": {0: "batch", 2: "out_height", 3: "out_width"}})
    return path


def _resize_nodes(model: onnx.ModelProto):
    return [node for node in model.graph.node if node.op_type == "Resize"]


def _attributes(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def test_legacy_export_keeps_scales_an_input(legacy_function_onnx):
    model = onnx.load(str(legacy_function_onnx))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input", "factor"]
    assert model.opset_import[0].version == 11
    (resize,) = _resize_nodes(model)
    initializers = {init.name for init in model.graph.initializer}
    assert resize.input[2] == "factor" and "factor" not in initializers
    attributes = _attributes(resize)
    assert attributes["mode"] == b"cubic"
    assert attributes["coordinate_transformation_mode"] == b"pytorch_half_pixel"
    assert attributes["cubic_coeff_a"] == pytest.approx(-0.75)
    assert attributes["nearest_mode"] == b"floor"


@pytest.mark.parametrize("factor", FACTORS)
def test_legacy_export_matches_pytorch_in_onnxruntime(legacy_function_onnx, weights, small_image, factor):
    session = ort_session(legacy_function_onnx)
    scales = np.array([1, 1, factor, factor], dtype=np.float32)
    (output,) = session.run(None, {"input": small_image.numpy(), "factor": scales})
    with torch.no_grad():
        expected = build(SRCNNFunction, weights)(small_image, torch.from_numpy(scales))
    torch.testing.assert_close(torch.from_numpy(output), expected, rtol=ORT_RTOL, atol=ORT_ATOL)


def test_item_export_bakes_the_factor_in(weights, small_image, tmp_path):
    path = tmp_path / "srcnn_item.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.onnx.export(build(SRCNNItem, weights), (small_image, torch.tensor(3.0)), str(path),
                          opset_version=11, dynamo=False)
    assert any(issubclass(w.category, torch.jit.TracerWarning)
               and "Converting a tensor to a Python number" in str(w.message) for w in caught)
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert len(model.graph.input) == 1
    (resize,) = _resize_nodes(model)
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    constants.update({node.output[0]: numpy_helper.to_array(node.attribute[0].t)
                      for node in model.graph.node if node.op_type == "Constant"})
    assert resize.input[2] in constants
    np.testing.assert_array_equal(constants[resize.input[2]], [1, 1, 3, 3])
    # What the chapter prints: the same, read by the package.
    assert srcnn.resize_inputs(model)["scales"] == (resize.input[2], "constant [1.0, 1.0, 3.0, 3.0]")


def test_resize_inputs_names_a_graph_input_and_refuses_other_graphs(legacy_function_onnx):
    model = onnx.load(str(legacy_function_onnx))
    sources = srcnn.resize_inputs(model)
    assert list(sources) == ["X", "roi", "scales"] or list(sources) == list(srcnn.RESIZE_SLOTS)
    assert sources["scales"] == ("factor", "graph input")
    assert "Resize.scales <- factor" in srcnn.describe_resize(model)
    empty = onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []))
    with pytest.raises(ValueError, match="found 0"):
        srcnn.resize_inputs(empty)


def test_dynamo_ignores_the_symbolic(weights, small_image):
    # torch.export traces DynamicResize.forward; scales.tolist() gives SymFloats, which interpolate refuses.
    with pytest.raises(Exception, match="SymFloat"):
        run_quietly(torch.onnx.export, build(SRCNNFunction, weights), (small_image, scales_tensor(3)),
                    dynamo=True, verbose=False)


@pytest.fixture(scope="module")
def dynamo_custom_op_onnx(weights, small_image, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dynamo")
    path = folder / "srcnn_custom_op.onnx"
    batch, height, width = (torch.export.Dim.DYNAMIC,) * 3
    run_quietly(torch.onnx.export, build(SRCNNCustomOp, weights), (small_image, scales_tensor(3)), str(path),
                dynamo=True, external_data=False, custom_translation_table=srcnn.TRANSLATION_TABLE,
                input_names=["input", "factor"], output_names=["output"],
                dynamic_shapes={"x": {0: batch, 2: height, 3: width}, "scales": None}, verbose=False)
    assert sorted(p.name for p in folder.iterdir()) == ["srcnn_custom_op.onnx"]   # no .onnx.data
    return path


def test_dynamo_custom_op_export(dynamo_custom_op_onnx):
    model = onnx.load(str(dynamo_custom_op_onnx))
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input", "factor"]
    assert model.opset_import[0].version >= 18
    (resize,) = _resize_nodes(model)
    assert resize.input[2] == "factor"
    assert _attributes(resize)["coordinate_transformation_mode"] == b"pytorch_half_pixel"
    assert _attributes(resize)["mode"] == b"cubic"
    assert not any(node.domain not in ("", "ai.onnx") for node in model.graph.node)


@pytest.mark.parametrize("factor", FACTORS)
def test_dynamo_custom_op_matches_pytorch_in_onnxruntime(dynamo_custom_op_onnx, weights, small_image, factor):
    session = ort_session(dynamo_custom_op_onnx)
    image = torch.cat([small_image, small_image.flip(-1)])      # another batch size than exported with
    scales = np.array([1, 1, factor, factor], dtype=np.float32)
    (output,) = session.run(None, {"input": image.numpy(), "factor": scales})
    with torch.no_grad():
        expected = build(SRCNNCustomOp, weights)(image, torch.from_numpy(scales))
    torch.testing.assert_close(torch.from_numpy(output), expected, rtol=ORT_RTOL, atol=ORT_ATOL)


# --- the book's trained weights --------------------------------------------------------

@pytest.mark.parametrize("path, factors", [
    (srcnn.WEIGHTS_X3, (3.0,)),
    (srcnn.WEIGHTS_MULTISCALE, FACTORS),
])
def test_trained_weights_beat_bicubic(path, factors):
    assert path.is_file(), (f"{path} is missing; train it with `python -m tritonbook.train_srcnn` "
                            "(assets/README.md has the command)")
    model = load_srcnn_checkpoint(path, SRCNN())
    for row in train_srcnn.evaluate(model, factors=factors):
        assert row["srcnn"] > row["bicubic"] + 0.2, f"{path.name}: {row}"


def test_psnr():
    a = np.zeros((4, 4, 3), np.uint8)
    b = a.copy()
    assert srcnn.psnr(a, b) == float("inf")
    b[0, 0, 0] = 255   # MSE = 255^2 / 48
    assert srcnn.psnr(a, b) == pytest.approx(10 * np.log10(48))
    assert srcnn.psnr(torch.zeros(1, 3, 4, 4), torch.full((1, 3, 4, 4), 255.0)) == pytest.approx(0.0)


def test_psnr_table_names_the_compared_column():
    high = torch.rand(1, 3, 8, 8) * 255
    low = high[..., ::2, ::2]
    report = parity(high, high + 0.5)
    table = srcnn.psnr_table({2: (low, high, high, report)}, compared="max |served - local|")
    assert table.loc[2, "max |served - local|"] == pytest.approx(0.5)
    assert table.loc[2, "output"] == "8x8" and table.loc[2, "PSNR SRCNN (dB)"] == float("inf")


def test_image_round_trip():
    image = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    tensor = srcnn.image_to_tensor(image)
    assert tensor.shape == (1, 3, 5, 7) and tensor.dtype == torch.float32 and float(tensor.max()) <= 255
    np.testing.assert_array_equal(srcnn.tensor_to_image(tensor), image)
    np.testing.assert_array_equal(srcnn.tensor_to_image(tensor + 0.4), image)
    assert srcnn.tensor_to_image(tensor * 0 - 5).max() == 0


def test_degrade_sizes():
    hr = torch.zeros(1, 3, 256, 256)
    for factor, low_size, target_size in [(2, 128, 256), (3, 85, 255), (4, 64, 256), (2.5, 102, 255)]:
        low, target = train_srcnn.degrade(hr, factor)
        assert low.shape[-1] == low_size and target.shape[-1] == target_size
        assert srcnn.bicubic_upscale(low, factor).shape == target.shape


def test_to_rgb_takes_a_bgr_tensor_or_image():
    image = np.zeros((2, 3, 3), np.uint8)
    image[..., 0] = 10  # blue, first in OpenCV's order
    assert srcnn.to_rgb(image)[0, 0].tolist() == [0, 0, 10]
    tensor = srcnn.image_to_tensor(image)
    assert np.array_equal(srcnn.to_rgb(tensor), srcnn.to_rgb(image))


def test_exporter_failure_keeps_the_first_line_and_the_cause_without_colours():
    report = (
        "\x1b[1mFailed to export the model\x1b[0m\n\n"
        "traceback lines\n"
        "<class 'RuntimeError'>: the reason\n"
    )
    first, cause = srcnn.exporter_failure(RuntimeError(report))
    assert first == "Failed to export the model"
    assert cause == "<class 'RuntimeError'>: the reason"
