"""tritonbook.gfpgan: architecture matches the released checkpoint's layout, ops are right, loading is strict."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tritonbook import gfpgan
from tritonbook.gfpgan import (CheckpointMismatchError, GFPGANv1, build_gfpgan, fused_leaky_relu, load_gfpgan,
                               upfirdn2d, use_ops)

# The official GFPGANv1 state_dict key lists (kind, key, shape), read off the upstream
# architecture; kept beside the tests so every clone can check against them.
REFERENCE = Path(__file__).resolve().parent / "reference"

# FACTS.md §6, in millions of parameters (rounded to 0.1 M).
PARAM_MILLIONS = {256: 71.9, 512: 76.2}


def reference_rows(out_size: int) -> list[tuple[str, str, str, int]]:
    """(kind, key, shape, numel) rows of the reference TSV, in file order."""
    path = REFERENCE / f"gfpganv1_state_dict_out{out_size}.tsv"
    assert path.is_file(), f"reference list {path} is missing"
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, key, shape, numel = line.split("\t")
        rows.append((kind, key, shape, int(numel)))
    assert rows, f"{path} has no rows"
    return rows


def model_rows(model: torch.nn.Module) -> list[tuple[str, str, str, int]]:
    """The same rows for a model, in state_dict order."""
    buffers = {name for name, _ in model.named_buffers()}
    return [("buffer" if key in buffers else "param", key, str(tuple(t.shape)), t.numel())
            for key, t in model.state_dict().items()]


@pytest.fixture(scope="module")
def models() -> dict[int, GFPGANv1]:
    """Architectures at both sizes (random weights), built once."""
    return {size: GFPGANv1(out_size=size) for size in (256, 512)}


# --- architecture -----------------------------------------------------------

@pytest.mark.parametrize("out_size", [256, 512])
def test_state_dict_matches_reference(models, out_size):
    expected = reference_rows(out_size)
    actual = model_rows(models[out_size])
    missing = sorted({r[1] for r in expected} - {r[1] for r in actual})
    extra = sorted({r[1] for r in actual} - {r[1] for r in expected})
    assert not missing and not extra, f"missing: {missing}\nextra: {extra}"
    assert actual == expected  # kinds, shapes, numels, and order


@pytest.mark.parametrize("out_size", [256, 512])
def test_parameter_count(models, out_size):
    count = sum(p.numel() for p in models[out_size].parameters())
    assert round(count / 1e6, 1) == PARAM_MILLIONS[out_size]
    assert count == sum(r[3] for r in reference_rows(out_size) if r[0] == "param")


def test_only_noise_maps_are_saved_buffers(models):
    # The blur kernels are buffers too, so that they move with the network, but not
    # persistent ones: the released checkpoints do not hold them.
    saved = models[256].state_dict()
    names = [name for name, _ in models[256].named_buffers() if name in saved]
    assert names == [f"stylegan_decoder.noises.noise{i}" for i in range(13)]


def test_fix_decoder_freezes_only_the_decoder(models):
    model = models[256]
    for name, param in model.named_parameters():
        assert param.requires_grad == (not name.startswith("stylegan_decoder.")), name
    assert all(p.requires_grad for p in GFPGANv1(out_size=32, fix_decoder=False).parameters())


# --- forward ----------------------------------------------------------------

@pytest.fixture(scope="module")
def model256() -> GFPGANv1:
    return build_gfpgan(out_size=256, seed=0)


@pytest.fixture(scope="module")
def face() -> torch.Tensor:
    generator = torch.Generator().manual_seed(1234)
    return torch.rand(1, 3, 256, 256, generator=generator) * 2 - 1


@pytest.fixture(scope="module")
def reference_output(model256, face) -> torch.Tensor:
    """The fixed-noise output of the seeded random model, computed once."""
    with torch.inference_mode():
        image, _ = model256(face, randomize_noise=False)
    return image


def test_forward_shape_and_finite(reference_output):
    assert reference_output.shape == (1, 3, 256, 256)
    assert reference_output.dtype == torch.float32
    assert torch.isfinite(reference_output).all()


def test_fixed_noise_is_deterministic_and_conditions_can_be_saved(model256, face, reference_output, tmp_path):
    feat_path = tmp_path / "conditions.pt"
    with torch.inference_mode():
        image, out_rgbs = model256(face, randomize_noise=False, save_feat_path=str(feat_path))
    assert torch.equal(image, reference_output)
    # intermediate RGBs at 8, 16, ..., 256
    assert [tuple(t.shape) for t in out_rgbs] == [(1, 3, 2 ** i, 2 ** i) for i in range(3, 9)]
    # conditions: a scale and a shift per level; sft_half -> half the decoder channels
    conditions = torch.load(feat_path, weights_only=True)
    assert len(conditions) == 12
    assert tuple(conditions[0].shape) == (1, 256, 8, 8)
    assert tuple(conditions[-1].shape) == (1, 32, 256, 256)


def test_random_noise_changes_output(model256, face, reference_output):
    with torch.inference_mode():
        image, out_rgbs = model256(face, return_rgb=False)  # randomize_noise=True is the default
    assert out_rgbs == []
    assert image.shape == reference_output.shape
    assert not torch.equal(image, reference_output)


def test_build_is_deterministic_per_seed():
    def weights(seed):
        return build_gfpgan(out_size=32, seed=seed).state_dict()

    first, again, other = weights(0), weights(0), weights(1)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["final_linear.weight"], other["final_linear.weight"])
    before = torch.random.get_rng_state()
    build_gfpgan(out_size=32, seed=3)
    assert torch.equal(before, torch.random.get_rng_state()), "build_gfpgan must not disturb the global RNG"


# --- loading ----------------------------------------------------------------

@pytest.mark.parametrize("entry", ["params_ema", "params"])
def test_round_trip(model256, face, reference_output, tmp_path, entry):
    path = tmp_path / "gfpgan.pth"
    torch.save({entry: model256.state_dict()}, path)
    loaded = load_gfpgan(path, out_size=256)
    assert not loaded.training
    with torch.inference_mode():
        image, _ = loaded(face, randomize_noise=False)
    assert torch.equal(image, reference_output)


def test_params_ema_is_preferred(model256, tmp_path):
    path = tmp_path / "both.pth"
    # a bad "params" must be ignored when "params_ema" is there
    torch.save({"params": {"junk": torch.zeros(1)}, "params_ema": model256.state_dict()}, path)
    loaded = load_gfpgan(path, out_size=256)
    assert torch.equal(loaded.final_linear.weight, model256.final_linear.weight)


def _broken_checkpoint(model256, tmp_path, change) -> Path:
    state_dict = dict(model256.state_dict())
    change(state_dict)
    path = tmp_path / "broken.pth"
    torch.save({"params_ema": state_dict}, path)
    return path


def test_missing_key_is_named(model256, tmp_path):
    key = "condition_shift.3.2.bias"
    path = _broken_checkpoint(model256, tmp_path, lambda sd: sd.pop(key))
    with pytest.raises(CheckpointMismatchError, match="missing") as error:
        load_gfpgan(path, out_size=256)
    assert key in str(error.value)


def test_wrong_shape_is_named(model256, tmp_path):
    key = "toRGB.2.weight"

    def change(sd):
        sd[key] = torch.zeros(3, 128, 1, 1)

    path = _broken_checkpoint(model256, tmp_path, change)
    with pytest.raises(CheckpointMismatchError, match="shape") as error:
        load_gfpgan(path, out_size=256)
    assert key in str(error.value)
    assert "(3, 128, 1, 1)" in str(error.value) and "(3, 256, 1, 1)" in str(error.value)


def test_wrong_out_size_is_explained(tmp_path):
    path = tmp_path / "small.pth"
    torch.save({"params_ema": GFPGANv1(out_size=32).state_dict()}, path)
    with pytest.raises(CheckpointMismatchError) as error:
        load_gfpgan(path, out_size=64)
    message = str(error.value)
    assert "conv_body_down.3.conv1.0.weight" in message  # only the 64 model has a 4th encoder block
    assert "out_size=32" in message


def test_checkpoint_without_params_lists_its_keys(tmp_path):
    path = tmp_path / "odd.pth"
    torch.save({"state_dict": {}, "epoch": 3}, path)
    with pytest.raises(CheckpointMismatchError, match="'state_dict', 'epoch'"):
        load_gfpgan(path)


def test_from_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(gfpgan.WEIGHTS_ENV, raising=False)
    monkeypatch.setattr(gfpgan, "ASSET_WEIGHTS", tmp_path / "GFPGANv1.pth")
    model, description = gfpgan.gfpgan_from_environment(out_size=32)
    assert isinstance(model, GFPGANv1) and not model.training and model.out_size == 32
    assert "not set" in description and "not trained" in description
    assert f"narrow={gfpgan.STAND_IN_NARROW}" in description

    monkeypatch.setenv(gfpgan.WEIGHTS_ENV, str(tmp_path / "nowhere.pth"))
    _, description = gfpgan.gfpgan_from_environment(out_size=32)
    assert "no such file" in description

    # A real checkpoint decides the size (the argument is for the random stand-in).
    real = build_gfpgan(out_size=32, seed=5)
    path = tmp_path / "real.pth"
    torch.save({"params_ema": real.state_dict()}, path)
    monkeypatch.setenv(gfpgan.WEIGHTS_ENV, str(path))
    model, description = gfpgan.gfpgan_from_environment(out_size=256)
    assert str(path) in description and "trained weights" in description and model.out_size == 32
    assert torch.equal(model.final_linear.weight, real.final_linear.weight)

    # Without the variable, a checkpoint dropped into assets/ is used.
    monkeypatch.delenv(gfpgan.WEIGHTS_ENV)
    torch.save({"params": real.state_dict()}, tmp_path / "GFPGANv1.pth")
    model, description = gfpgan.gfpgan_from_environment()
    assert "GFPGANv1.pth" in description and torch.equal(model.toRGB[0].weight, real.toRGB[0].weight)


def test_checkpoint_size_is_read_from_its_noise_maps():
    for size in (32, 256, 512):
        assert gfpgan.checkpoint_out_size(GFPGANv1(out_size=size).state_dict()) == size
    assert gfpgan.checkpoint_out_size({}) is None


# --- the custom ops ---------------------------------------------------------

def upfirdn2d_reference(x: np.ndarray, kernel: np.ndarray, up: int, down: int, pad: tuple[int, int]) -> np.ndarray:
    """upfirdn2d straight from its definition, one output sample at a time.

    out[i, j] = sum_{a, b} kernel[a, b] * u[i * down + kh - 1 - a - pad0, j * down + kw - 1 - b - pad0],
    where u is the zero-stuffed input: u[p, q] = x[p / up, q / up] when both divide, else 0.
    """
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    pad0, pad1 = pad
    out_h = (h * up + pad0 + pad1 - kh) // down + 1
    out_w = (w * up + pad0 + pad1 - kw) // down + 1

    def u(p, q):
        if p < 0 or q < 0 or p % up or q % up or p // up >= h or q // up >= w:
            return np.zeros((n, c))
        return x[:, :, p // up, q // up]

    out = np.zeros((n, c, out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            for a in range(kh):
                for b in range(kw):
                    # index into the padded signal, then back into the unpadded one
                    p = i * down + (kh - 1 - a) - pad0
                    q = j * down + (kw - 1 - b) - pad0
                    out[:, :, i, j] += kernel[a, b] * u(p, q)
    return out


@pytest.mark.parametrize("up, down, pad", [
    (2, 1, (2, 1)),    # ToRGB skip upsampling
    (1, 1, (1, 1)),    # blur after the transposed conv
    (1, 2, (1, 1)),    # downsampling, 1x1 conv
    (1, 2, (2, 2)),    # downsampling, 3x3 conv
    (2, 1, (-1, 0)),   # negative pads crop
    (1, 2, (-1, 2)),
    (2, 2, (1, -2)),
    (3, 1, (0, -1)),
])
def test_upfirdn2d_matches_definition(up, down, pad):
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 5, 7, generator=generator, dtype=torch.float64)  # not square: catches H/W mix-ups
    kernel = torch.randn(4, 3, generator=generator, dtype=torch.float64)  # not symmetric: catches a missing flip
    expected = upfirdn2d_reference(x.numpy(), kernel.numpy(), up, down, pad)
    actual = upfirdn2d(x, kernel, up=up, down=down, pad=pad)
    assert tuple(actual.shape) == expected.shape
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_blur_kernel_is_normalised_and_not_in_state_dict():
    module = gfpgan.UpFirDnUpsample((1, 3, 3, 1), factor=2)
    assert torch.allclose(module.kernel.sum(), torch.tensor(4.0))  # sum 1, times factor**2
    assert torch.allclose(module.kernel[0], torch.tensor([1.0, 3, 3, 1]) / 64 * 4)
    assert module.state_dict() == {}
    assert module(torch.ones(1, 1, 4, 6)).shape == (1, 1, 8, 12)


@pytest.mark.parametrize("shape", [(4, 6), (2, 6, 3, 5)])
def test_fused_leaky_relu(shape):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=generator)
    bias = torch.randn(6, generator=generator)
    moved = x + bias.view([1, 6] + [1] * (x.dim() - 2))
    expected = torch.where(moved >= 0, moved, 0.2 * moved) * math.sqrt(2)
    torch.testing.assert_close(fused_leaky_relu(x, bias), expected)
    torch.testing.assert_close(gfpgan.FusedLeakyReLU(6).forward(x), fused_leaky_relu(x, torch.zeros(6)))
    torch.testing.assert_close(fused_leaky_relu(x, None), torch.nn.functional.leaky_relu(x, 0.2) * math.sqrt(2))


def test_ops_can_be_swapped():
    calls = {"fused_leaky_relu": 0, "upfirdn2d": 0}

    def counting(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    block = gfpgan.ResBlock(4, 8)
    x = torch.randn(1, 4, 8, 8)
    expected = block(x)
    with use_ops(fused_leaky_relu=counting("fused_leaky_relu", fused_leaky_relu),
                 upfirdn2d=counting("upfirdn2d", upfirdn2d)):
        torch.testing.assert_close(block(x), expected)
    assert calls == {"fused_leaky_relu": 2, "upfirdn2d": 2}
    assert gfpgan.OPS.fused_leaky_relu is fused_leaky_relu and gfpgan.OPS.upfirdn2d is upfirdn2d


# --- deployment forms (chapters 2 and 3) -------------------------------------

def test_deploy_wrapper_equals_the_inference_call_exactly():
    net = build_gfpgan(out_size=32, seed=3)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        expected, _ = net(x, return_rgb=False, randomize_noise=False)
        assert torch.equal(gfpgan.GFPGANForDeploy(net)(x), expected)


def test_shared_weight_modconv_equals_grouped_to_rounding():
    net = gfpgan.GFPGANForDeploy(build_gfpgan(out_size=32, seed=4))
    x = torch.rand(3, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        grouped = net(x)
        with gfpgan.use_ops(fused_modconv=False) as ops:
            assert ops.fused_modconv is False
            shared = net(x)
    assert gfpgan.OPS.fused_modconv is True  # restored
    assert not torch.equal(shared, grouped)  # different arithmetic order...
    torch.testing.assert_close(shared, grouped, rtol=1e-4, atol=1e-4)  # ...same values


def test_grouped_trace_bakes_in_the_batch_and_shared_trace_does_not():
    import warnings

    net = gfpgan.GFPGANForDeploy(build_gfpgan(out_size=32, seed=5)).eval()
    one, three = torch.rand(1, 3, 32, 32), torch.rand(3, 3, 32, 32)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grouped = torch.jit.trace(net, one, check_trace=False)
        with pytest.raises(RuntimeError, match="groups=1"):
            grouped(three)
        with gfpgan.use_ops(fused_modconv=False):
            shared = torch.jit.trace(net, one, check_trace=False)
        torch.testing.assert_close(shared(three), net(three), rtol=1e-4, atol=1e-4)


def test_torchscript_builder_writes_a_batch_agnostic_file(tmp_path, monkeypatch):
    from tritonbook import repository

    monkeypatch.delenv(gfpgan.WEIGHTS_ENV, raising=False)
    monkeypatch.setattr(gfpgan, "ASSET_WEIGHTS", tmp_path / "absent.pth")
    built = repository.ensure_model_files(["gfpgan"], repository=tmp_path)
    assert built == [tmp_path / "gfpgan" / "1" / "model.pt"]
    assert not list(tmp_path.rglob("*.partial"))
    extra = {"tritonbook.txt": ""}
    with pytest.warns(DeprecationWarning):
        loaded = torch.jit.load(str(built[0]), _extra_files=extra)
    assert b"randomly initialised" in extra["tritonbook.txt"]
    x = torch.rand(2, 3, 256, 256) * 2 - 1
    with torch.no_grad():
        reference = gfpgan.GFPGANForDeploy(
            build_gfpgan(out_size=256, seed=0, narrow=gfpgan.STAND_IN_NARROW)
        )(x)
        torch.testing.assert_close(loaded(x), reference, rtol=1e-4, atol=1e-4)
    assert repository.ensure_model_files(["gfpgan"], repository=tmp_path) == []  # present: not rebuilt


def test_warning_counts_groups_a_trace_warnings_by_kind():
    import warnings

    from tritonbook.torchscript import warning_counts

    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # a tensor read as a Python bool: a TracerWarning
                return x + int(x.shape[0])
            return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(Branchy(), (torch.ones(2, 3),))
        torch.jit.trace(Branchy(), (torch.ones(2, 3),))
    lines = warning_counts(caught, width=40)
    tracer = [line for line in lines if "TracerWarning" in line]
    # The same two sites in both traces (each recorded again by check_trace).
    kinds = {line.split(": ", 1)[1].strip() for line in tracer}
    assert kinds == {"Converting a tensor to a Python boolean",
                     "Converting a tensor to a Python integer"}
    assert all(int(line.split(" x ")[0]) % 2 == 0 for line in tracer)
    assert all(len(line.split(": ", 1)[1]) <= 40 for line in lines)
    assert [line.split(" x ", 1)[1] for line in lines] == sorted(line.split(" x ", 1)[1] for line in lines)
    assert sum(int(line.split(" x ")[0]) for line in lines) == len(caught)
    assert warning_counts([]) == []


def test_script_error_summary_names_the_reason_and_the_line():
    from tritonbook.torchscript import script_error_summary

    class Unscriptable(torch.nn.Module):
        def forward(self, x):
            return gfpgan.OPS.fused_leaky_relu(x, None)

    try:
        torch.jit.script(Unscriptable())
    except RuntimeError as error:
        summary = script_error_summary(error)
    else:
        raise AssertionError("expected torch.jit.script to reject the module")
    reason, line = summary.splitlines()
    assert reason.startswith("RuntimeError: ") and "_Ops" in reason
    assert line == "at: return gfpgan.OPS.fused_leaky_relu(x, None)"
    # An error that points at no line: the reason alone.
    assert script_error_summary(RuntimeError("no source\n")) == "RuntimeError: no source"


class _PoolToNoneWidth(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d((None, 1))

    def forward(self, x):
        return self.pool(x)


def test_script_failure_gives_the_reason_after_a_schema_line_and_refuses_a_module_that_scripts():
    from tritonbook.torchscript import script_failure

    # The error starts with adaptive_avg_pool2d's schema; the reason is the line after it.
    reason, line = script_failure(_PoolToNoneWidth(), width=None).splitlines()
    assert reason.startswith("RuntimeError: Expected a value of type 'List[int]' for argument 'output_size'")
    assert line.startswith("at: return F.adaptive_avg_pool2d(")
    assert len(script_failure(_PoolToNoneWidth(), width=40).splitlines()[0]) <= len("RuntimeError: ") + 40
    with pytest.raises(AssertionError, match="expected torch.jit.script to fail"):
        script_failure(torch.nn.ReLU())
    # An underline over several lines: the line where it starts.
    assert script_failure(_UntypedFlag()).splitlines()[1] == "at: def forward(self, x, is_train=True):"


class _UntypedFlag(torch.nn.Module):
    def forward(self, x, is_train=True):
        return x * 2 if is_train else x


def test_export_error_causes_reads_the_exporters_summary():
    from tritonbook.torchscript import export_error_causes

    summary = RuntimeError(
        "Failed to convert the exported program to an ONNX model.\n"
        "<class 'ValueError'>: Unsupported attribute type: "
        "'<class 'torch.onnx._internal.exporter._tensors.SymbolicTensor'>'\n"
        "<class 'ConversionError'>: Error constructing node for operator '::Conv'. "
        "named_inputs={'X': x}\n"
        "(a line that is not a cause)\n")
    assert export_error_causes(summary) == [
        "Unsupported attribute type: '<class 'SymbolicTensor'>'",
        "Error constructing node for operator '::Conv'"]
    assert export_error_causes(RuntimeError("no causes listed")) == []
