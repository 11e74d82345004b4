"""tritonbook.cpp_ops: the compiled GFPGAN ops match the plain ones, differentiate correctly, and cannot be saved traced."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn

from tritonbook import cpp_ops, gfpgan
from tritonbook.cpp_ops import (FusedLeakyReLUFunction, UpFirDn2dFunction, extension_info, fused_leaky_relu_ext,
                                load_extension, upfirdn2d_ext)
from tritonbook.gfpgan import build_gfpgan, fused_leaky_relu, upfirdn2d, use_ops

# The network used for recording the op configurations and for the whole-network check.
OUT_SIZE = 32

# The (up, down, pad, kernel shape) configurations GFPGANv1 uses, worked out by
# hand from UpFirDnUpsample / UpFirDnSmooth; the recording test checks them.
EXPECTED_CONFIGS = {
    (2, 1, (2, 1), (4, 4)),  # ToRGB skip upsampling
    (1, 1, (1, 1), (4, 4)),  # blur after the upsampling transposed conv, and before 1x1 downsampling convs
    (1, 1, (2, 2), (4, 4)),  # blur before 3x3 downsampling convs
}

# More configurations than the network needs: downsampling, crops, odd kernels, up and down together.
EXTRA_CONFIGS = [
    (1, 2, (1, 1), (4, 4)),
    (1, 2, (2, 1), (4, 4)),
    (2, 2, (1, 2), (3, 3)),
    (3, 1, (0, 0), (2, 5)),
    (1, 1, (-1, 2), (3, 2)),
    (2, 1, (-2, -1), (4, 4)),
    (1, 3, (0, 4), (1, 1)),
]


@pytest.fixture(scope="module")
def ext():
    """The compiled extension (built on first use; skipped only if the build tools are missing)."""
    missing = cpp_ops._missing_tools()
    if missing:
        pytest.skip("cannot compile the extension here: missing " + "; ".join(missing))
    return load_extension()


@pytest.fixture(scope="module")
def network_run():
    """A small GFPGANv1, its plain-ops output, and every (up, down, pad, kernel) / fused-act call it made."""
    model = build_gfpgan(out_size=OUT_SIZE)
    x = torch.randn(1, 3, OUT_SIZE, OUT_SIZE, generator=torch.Generator().manual_seed(1))
    upfirdn_calls: dict[tuple, tuple] = {}
    act_calls: set[tuple] = set()

    def recording_upfirdn2d(x, kernel, up=1, down=1, pad=(0, 0)):
        key = (up, down, tuple(int(p) for p in pad), tuple(kernel.shape))
        upfirdn_calls.setdefault(key, (tuple(x.shape), kernel.detach().clone()))
        return upfirdn2d(x, kernel, up, down, pad)

    def recording_fused_leaky_relu(x, bias, negative_slope=0.2, scale=2 ** 0.5):
        act_calls.add((x.dim(), bias is None, negative_slope, scale))
        return fused_leaky_relu(x, bias, negative_slope, scale)

    with torch.no_grad(), use_ops(fused_leaky_relu=recording_fused_leaky_relu, upfirdn2d=recording_upfirdn2d):
        image, _ = model(x, randomize_noise=False, return_rgb=False)
    return {"model": model, "input": x, "image": image, "upfirdn2d": upfirdn_calls, "act": act_calls}


def _random(shape, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


def _away_from_kink(shape, bias, seed=0):
    """float64 x with x + bias at least 0.1 away from 0 (finite differences must not cross the kink)."""
    v = _random(shape, torch.float64, seed)
    v = v + 0.1 * torch.sign(v)
    if bias is not None:
        v = v - bias.view([1, -1] + [1] * (len(shape) - 2))
    return v


# --- the build --------------------------------------------------------------

def test_extension_builds_cpu_kernels(ext):
    info = extension_info()
    assert "cpu" in info["kernels"]
    assert ("cuda" in info["kernels"]) == bool(ext.built_with_cuda())
    assert info["name"].startswith(cpp_ops.EXTENSION_NAME)
    assert info["cuda"] == "built" or info["cuda"].startswith("not built: ")
    assert load_extension() is ext  # cached in-process


def test_the_kernels_float_instructions_are_read_from_the_built_library(ext):
    for kernel in ("forward_cpu_kernelIf", "backward_cpu_kernelIf"):
        counts = cpp_ops.float_instructions(kernel)
        assert set(counts) == {"scalar", "packed", "conditional jumps"}
        assert counts["scalar"] + counts["packed"] > 0, (kernel, counts)
    with pytest.raises(RuntimeError, match="expected one OpenMP body"):
        cpp_ops.float_instructions("no_such_kernel")


def test_missing_build_tools_are_named(monkeypatch):
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_ops, "_extension", None)  # as if not built yet in this process
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"missing a C\+\+ compiler \('no-such-compiler-here', named by \$CXX, "
                                           r"is not on PATH.*; and ninja"):
        load_extension()


# --- forward parity with the plain ops --------------------------------------

@pytest.mark.parametrize("shape", [(4, 16), (2, 8, 5, 7), (2, 3, 4, 5, 6)], ids=["2d", "4d", "5d"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_leaky_relu_matches_plain(ext, shape, with_bias, dtype):
    x = _random(shape, dtype, seed=1)
    bias = _random((shape[1],), dtype, seed=2) if with_bias else None
    for slope, scale in [(0.2, 2 ** 0.5), (0.01, 1.0)]:
        expected = fused_leaky_relu(x, bias, slope, scale)
        actual = fused_leaky_relu_ext(x, bias, slope, scale)
        assert actual.dtype == dtype and actual.shape == x.shape
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)  # same operations, same rounding


def test_fused_leaky_relu_non_contiguous_input(ext):
    x = _random((3, 6, 5, 4), seed=3).transpose(2, 3)
    bias = _random((6,), seed=4)
    torch.testing.assert_close(fused_leaky_relu_ext(x, bias), fused_leaky_relu(x, bias))


def test_network_uses_the_expected_configurations(network_run):
    assert set(network_run["upfirdn2d"]) == EXPECTED_CONFIGS
    # Every activation in the default GFPGANv1 is 4-D with a bias (the 2-D EqualLinear ones are in the unused MLP).
    assert network_run["act"] == {(4, False, 0.2, 2 ** 0.5)}


def _check_upfirdn2d_parity(config, kernel, shapes, dtype):
    up, down, pad, _ = config
    for i, shape in enumerate(shapes):
        x = _random(shape, dtype, seed=10 + i)
        expected = upfirdn2d(x, kernel.to(dtype), up=up, down=down, pad=pad)
        actual = upfirdn2d_ext(x, kernel, up=up, down=down, pad=pad)
        assert actual.shape == expected.shape, (config, shape)
        if dtype == torch.float64:
            torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12, msg=f"{config} {shape}")
        else:
            torch.testing.assert_close(actual, expected, msg=f"{config} {shape}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_upfirdn2d_matches_plain_on_network_configurations(ext, network_run, dtype):
    for config, (shape, kernel) in sorted(network_run["upfirdn2d"].items()):
        # the shape the network used (batch and channels trimmed), plus odd and non-square sizes
        n, c, h, w = shape
        shapes = [(1, min(c, 8), h, w), (2, 3, 5, 5), (1, 2, 7, 4), (1, 1, 2, 3)]
        _check_upfirdn2d_parity(config, kernel, shapes, dtype)


@pytest.mark.parametrize("config", EXTRA_CONFIGS, ids=str)
def test_upfirdn2d_matches_plain_on_other_configurations(ext, config):
    kernel = _random(config[3], seed=5)
    _check_upfirdn2d_parity(config, kernel, [(2, 3, 9, 8), (1, 2, 6, 11)], torch.float32)
    _check_upfirdn2d_parity(config, kernel, [(1, 2, 7, 6)], torch.float64)


def test_upfirdn2d_separate_axes(ext):
    """(x, y) factors and four pads (the plain op has one set for both axes), against the definition."""
    x = _random((1, 2, 6, 7), torch.float64, seed=6)
    kx, ky = _random((1, 3), torch.float64, seed=7), _random((4, 1), torch.float64, seed=8)
    actual = upfirdn2d_ext(x, ky @ kx, up=(2, 1), down=(1, 2), pad=(1, 2, -1, 3))  # pad = (x0, x1, y0, y1)
    # x axis: up 2, down 1, pads (1, 2), kernel kx; y axis: up 1, down 2, pads (-1, 3), kernel ky.
    expected = _separable_reference(x, kx[0], ky[:, 0], up=(2, 1), down=(1, 2), pad=(1, 2, -1, 3))
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def _separable_reference(x, kx, ky, up, down, pad):
    """Straight from the definition, one output element at a time (float64, tiny inputs only)."""
    (up_x, up_y), (down_x, down_y) = up, down
    pad_x0, pad_x1, pad_y0, pad_y1 = pad
    n, c, h, w = x.shape
    out_h = (h * up_y + pad_y0 + pad_y1 - len(ky)) // down_y + 1
    out_w = (w * up_x + pad_x0 + pad_x1 - len(kx)) // down_x + 1
    out = torch.zeros(n, c, out_h, out_w, dtype=x.dtype)

    def u(m_y, m_x):  # the zero-inserted input
        if m_y < 0 or m_x < 0 or m_y >= h * up_y or m_x >= w * up_x or m_y % up_y or m_x % up_x:
            return torch.zeros(n, c, dtype=x.dtype)
        return x[:, :, m_y // up_y, m_x // up_x]

    for oy in range(out_h):
        for ox in range(out_w):
            for ty in range(len(ky)):
                for tx in range(len(kx)):
                    weight = ky[len(ky) - 1 - ty] * kx[len(kx) - 1 - tx]  # true convolution: flipped taps
                    out[:, :, oy, ox] += weight * u(oy * down_y + ty - pad_y0, ox * down_x + tx - pad_x0)
    return out


# --- gradients --------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4, 5)], ids=["2d", "4d"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_fused_leaky_relu_gradcheck(ext, shape, with_bias):
    bias = _random((shape[1],), torch.float64, seed=20) if with_bias else None
    x = _away_from_kink(shape, bias, seed=21).requires_grad_()
    inputs = (x, bias.requires_grad_()) if with_bias else (x,)

    def fn(*args):
        return FusedLeakyReLUFunction.apply(args[0], args[1] if with_bias else None, 0.2, 2 ** 0.5)

    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


UPFIRDN_GRAD_CONFIGS = [c for c in sorted(EXPECTED_CONFIGS)] + EXTRA_CONFIGS


@pytest.mark.parametrize("config", UPFIRDN_GRAD_CONFIGS, ids=str)
def test_upfirdn2d_gradcheck(ext, config):
    up, down, pad, kshape = config
    kernel = _random(kshape, torch.float64, seed=30)
    x = _random((1, 2, 5, 6), torch.float64, seed=31).requires_grad_()

    def fn(t):
        return upfirdn2d_ext(t, kernel, up=up, down=down, pad=pad)

    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


def test_upfirdn2d_gradcheck_separate_axes(ext):
    kernel = _random((3, 4), torch.float64, seed=32)
    x = _random((1, 1, 5, 4), torch.float64, seed=33).requires_grad_()

    def fn(t):
        return UpFirDn2dFunction.apply(t, kernel, (2, 1), (1, 2), (1, 2, -1, 3))

    assert torch.autograd.gradcheck(fn, (x,))


def test_gradients_match_plain_ops(ext):
    x = _random((2, 6, 9, 9), seed=40)
    bias = _random((6,), seed=41)
    kernel = gfpgan.make_resample_kernel((1, 3, 3, 1)) * 4
    weight = _random((2, 6, 18, 18), seed=42)

    grads = []
    for act, resample in [(fused_leaky_relu, upfirdn2d), (fused_leaky_relu_ext, upfirdn2d_ext)]:
        xi, bi = x.clone().requires_grad_(), bias.clone().requires_grad_()
        out = resample(act(xi, bi), kernel, up=2, down=1, pad=(2, 1))
        (gx, gb) = torch.autograd.grad((out * weight).sum(), (xi, bi), create_graph=True)
        # and one level further: gradient of a function of the gradient
        (ggx,) = torch.autograd.grad((gx * gx).sum() + gb.sum(), xi, allow_unused=True)
        grads.append((gx.detach(), gb.detach(), ggx))
    (gx0, gb0, ggx0), (gx1, gb1, ggx1) = grads
    torch.testing.assert_close(gx1, gx0)
    torch.testing.assert_close(gb1, gb0)
    # second derivative w.r.t. x is zero almost everywhere for a piecewise-linear op; both must say so
    for ggx in (ggx0, ggx1):
        assert ggx is None or torch.count_nonzero(ggx) == 0


# --- the whole network ------------------------------------------------------

def test_whole_network_matches_plain_ops(ext, network_run):
    model, x = network_run["model"], network_run["input"]
    with torch.no_grad(), use_ops(fused_leaky_relu=fused_leaky_relu_ext, upfirdn2d=upfirdn2d_ext):
        image, _ = model(x, randomize_noise=False, return_rgb=False)
    assert gfpgan.OPS.upfirdn2d is upfirdn2d  # use_ops restored the plain ops
    torch.testing.assert_close(image, network_run["image"], rtol=1e-4, atol=1e-4)


# --- what the book demonstrates: trace works, save does not -----------------

class _TinyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1, 1, 4))
        self.kernel = gfpgan.make_resample_kernel((1, 3, 3, 1)) * 4

    def forward(self, x):
        return upfirdn2d_ext(fused_leaky_relu_ext(x, self.bias), self.kernel, up=2, pad=(2, 1))


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_trace_works_but_save_fails(ext, network_run, tmp_path):
    # A real block of the network (ResBlock: FusedLeakyReLU and upfirdn2d blurs) and a tiny one.
    block = network_run["model"].conv_body_down[0]
    for module, x in [(block, _random((1, block.conv1[0].weight.shape[1], 16, 16), seed=50)),
                      (_TinyBlock().eval(), _random((1, 4, 6, 6), seed=51))]:
        with torch.no_grad(), use_ops(fused_leaky_relu=fused_leaky_relu_ext, upfirdn2d=upfirdn2d_ext):
            expected = module(x)
            traced = torch.jit.trace(module, x)
        python_ops = [node.pyname() for node in traced.inlined_graph.nodes() if node.kind() == "prim::PythonOp"]
        assert set(python_ops) == {"FusedLeakyReLUFunction", "UpFirDn2dFunction"}, python_ops
        with torch.no_grad():
            torch.testing.assert_close(traced(x), expected)  # the traced module runs (in this process)
        with pytest.raises(RuntimeError, match="Could not export Python function call"):
            traced.save(str(tmp_path / "traced.pt"))
        with pytest.raises(RuntimeError, match="Could not export Python function call"):
            torch.jit.save(traced, str(tmp_path / "traced2.pt"))


# --- clear errors -----------------------------------------------------------

def test_clear_errors(ext):
    kernel = torch.ones(4, 4) / 16
    with pytest.raises(RuntimeError, match=r"upfirdn2d: input must be 4-D \(N, C, H, W\), got 3-D"):
        upfirdn2d_ext(torch.zeros(3, 8, 8), kernel)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: kernel must be 2-D"):
        ext.upfirdn2d(torch.zeros(1, 1, 8, 8), torch.ones(4), 1, 1, 1, 1, 0, 0, 0, 0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: the kernel \(4x4\) is larger than"):
        upfirdn2d_ext(torch.zeros(1, 1, 2, 2), kernel)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: up and down factors must be >= 1"):
        upfirdn2d_ext(torch.zeros(1, 1, 8, 8), kernel, up=0)
    with pytest.raises(RuntimeError, match=r"upfirdn2d: the CPU kernel supports float32 and float64"):
        upfirdn2d_ext(torch.zeros(1, 1, 8, 8, dtype=torch.bfloat16), kernel)
    with pytest.raises(RuntimeError, match=r"fused_bias_act: input must have at least 2 dimensions"):
        fused_leaky_relu_ext(torch.zeros(5), None)
    with pytest.raises(RuntimeError, match=r"fused_bias_act: bias must have shape \(C,\) = \(3,\)"):
        fused_leaky_relu_ext(torch.zeros(2, 3, 4, 4), torch.zeros(4))
    with pytest.raises(RuntimeError, match=r"fused_bias_act: bias dtype Double differs from input dtype Float"):
        fused_leaky_relu_ext(torch.zeros(2, 3), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"fused_bias_act: input must be a floating-point tensor"):
        fused_leaky_relu_ext(torch.zeros(2, 3, dtype=torch.int64), None)
    with pytest.raises(ValueError, match="pad must be"):
        upfirdn2d_ext(torch.zeros(1, 1, 8, 8), kernel, pad=(1, 2, 3))


# --- CUDA -------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the CUDA kernels are built only then)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_cuda_matches_plain(ext, dtype):
    """CUDA kernels against the plain ops in float64 on the same (rounded) inputs.

    float64, because the plain upfirdn2d is a cuDNN convolution, which may use
    TF32 for float32 inputs; half gets a tolerance of about one rounding step.
    """
    assert "cuda" in extension_info()["kernels"], "a GPU is present but the CUDA kernels were not built"
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-3, atol=1e-3)
    x = _random((4, 16, 9, 8), dtype, seed=60, device="cuda")
    bias = _random((16,), dtype, seed=61, device="cuda")
    for xi, bi in [(x, bias), (x[:, :, 0, 0], bias), (x, None)]:
        expected = fused_leaky_relu(xi.double(), None if bi is None else bi.double()).to(dtype)
        actual = fused_leaky_relu_ext(xi, bi)
        assert actual.dtype == dtype and actual.is_cuda
        torch.testing.assert_close(actual, expected, **tol)
    for config in sorted(EXPECTED_CONFIGS) + EXTRA_CONFIGS:
        up, down, pad, kshape = config
        kernel = _random(kshape, dtype, seed=62, device="cuda")
        expected = upfirdn2d(x.double(), kernel.double(), up=up, down=down, pad=pad).to(dtype)
        actual = upfirdn2d_ext(x, kernel, up=up, down=down, pad=pad)
        assert actual.dtype == dtype and actual.is_cuda
        torch.testing.assert_close(actual, expected, **tol, msg=str(config))
    if dtype == torch.float32:
        kernel = gfpgan.make_resample_kernel((1, 3, 3, 1)) * 4
        xi = x.clone().requires_grad_()
        out = upfirdn2d_ext(fused_leaky_relu_ext(xi, bias), kernel, up=2, pad=(2, 1))
        (grad,) = torch.autograd.grad(out.square().sum(), xi)
        xp = x.double().requires_grad_()
        out_plain = upfirdn2d(fused_leaky_relu(xp, bias.double()), kernel.double().cuda(), up=2, pad=(2, 1))
        (grad_plain,) = torch.autograd.grad(out_plain.square().sum(), xp)
        torch.testing.assert_close(grad, grad_plain.float(), rtol=1e-4, atol=1e-4)


def test_parity_cases_cover_the_recorded_calls_and_the_extras(ext):
    # Chapter 1's grid: one case per recorded shape or configuration, a 2-D activation,
    # and the extra upfirdn2d configurations; each pair of ops agrees on its inputs.
    calls = {"fused_leaky_relu": [((1, 8, 4, 4), True, 0.2, 2 ** 0.5)] * 3,
             "upfirdn2d": [((1, 8, 16, 16), (4, 4), 2, 1, (2, 1))] * 2}
    cases = list(cpp_ops.parity_cases(calls))
    ops = [op for op, *_ in cases]
    assert ops == ["fused_leaky_relu"] * 2 + ["upfirdn2d"] * (1 + len(cpp_ops.EXTRA_UPFIRDN2D_CASES))
    assert cases[1][1] == "2-D (2, 512)"
    for op, case, (compiled, plain), inputs, _ in cases:
        torch.testing.assert_close(compiled(*inputs), plain(*inputs), rtol=1e-5, atol=1e-5,
                                   msg=lambda m, case=case: f"{case}: {m}")


def test_largest_differences_sees_a_forward_and_a_backward_difference():
    x, bias = torch.randn(2, 4, 3, 3), torch.randn(4)
    same = cpp_ops.largest_differences(fused_leaky_relu, fused_leaky_relu, [x, bias], [x, bias])
    assert same == (0.0, 0.0)
    # A different forward value, and a different gradient through a detached bias.
    shifted = cpp_ops.largest_differences(fused_leaky_relu, lambda t, b: fused_leaky_relu(t, b) + 0.5,
                                          [x, bias], [x])
    assert shifted[0] == pytest.approx(0.5) and shifted[1] == 0.0
    def no_bias_gradient(t, b):
        return fused_leaky_relu(t, b.detach())
    forward, backward = cpp_ops.largest_differences(fused_leaky_relu, no_bias_gradient, [x, bias], [x])
    assert forward == 0.0 and backward == 0.0  # only x's gradient is compared
    with pytest.raises(ValueError, match="input 1: .* the candidate op gives it none"):
        cpp_ops.largest_differences(fused_leaky_relu, no_bias_gradient, [x, bias], [x, bias])


def test_relative_differences_scale_by_the_reference_magnitude():
    # One float16 step at 256 (0.25) is an absolute difference of 0.25 and a relative
    # one of about 1e-3: the float16 tolerance must be relative (book/gpu.md).
    x = torch.full((3,), 256.0)
    shifted = lambda t: t + 0.25  # noqa: E731
    forward, _ = cpp_ops.largest_differences(lambda t: t, shifted, [x], [x])
    assert forward == 0.25
    relative, grad = cpp_ops.largest_differences(lambda t: t, shifted, [x], [x], relative=True)
    assert relative == pytest.approx(0.25 / 256) and grad == 0.0
    zeros = torch.zeros(3)
    assert cpp_ops.largest_differences(lambda t: t * 0, lambda t: t * 0 + 1e-3, [zeros], [zeros],
                                       relative=True)[0] == pytest.approx(1e-3)


# The op library of chapter 5: tritonbook::fused_leaky_relu, registered by TORCH_LIBRARY.

@pytest.fixture(scope="module")
def op_library():
    """The library, built (or found in the cache) and loaded into this process."""
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler")
    library = cpp_ops.build_op_library()
    torch.ops.load_library(str(library))
    return library


class _BiasAct(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tensor([0.5, -1.0, 0.0]))

    def forward(self, x):
        return torch.ops.tritonbook.fused_leaky_relu(x, self.bias)


def test_op_library_matches_the_plain_op(op_library):
    x = torch.randn(2, 3, 4, 4)
    bias = torch.randn(3)
    got = torch.ops.tritonbook.fused_leaky_relu(x, bias, 0.2, 2 ** 0.5)
    torch.testing.assert_close(got, fused_leaky_relu(x, bias))
    # Its defaults are StyleGAN2's: slope 0.2, gain sqrt(2).
    torch.testing.assert_close(torch.ops.tritonbook.fused_leaky_relu(x, bias), got)


def test_op_library_rejects_bad_input_with_a_clear_error(op_library):
    with pytest.raises(RuntimeError, match="needs a channel dimension"):
        torch.ops.tritonbook.fused_leaky_relu(torch.zeros(3), torch.zeros(3))
    with pytest.raises(RuntimeError, match="one value per channel"):
        torch.ops.tritonbook.fused_leaky_relu(torch.zeros(2, 3), torch.zeros(4))


def test_op_library_is_reused_and_needs_no_python(op_library):
    assert cpp_ops.build_op_library() == op_library  # the cached build, not a new one
    if shutil.which("ldd") is None:
        pytest.skip("no ldd")
    needed = subprocess.run(["ldd", str(op_library)], capture_output=True, text=True,
                            check=False).stdout
    assert "libtorch_cpu" in needed
    assert "libpython" not in needed and "libtorch_python" not in needed


def test_a_saved_call_needs_the_library_in_the_loading_process(op_library, tmp_path):
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(_BiasAct()), str(path))
    load = (f"import json, torch; m = torch.jit.load({str(path)!r}); "
            "print(json.dumps(m(torch.ones(1, 3)).tolist()))")
    without = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, check=False)
    assert without.returncode != 0
    assert "Unknown builtin op: tritonbook::fused_leaky_relu" in without.stderr
    with_library = subprocess.run(
        [sys.executable, "-c", f"import torch; torch.ops.load_library({str(op_library)!r}); {load}"],
        capture_output=True, text=True, check=False)
    assert with_library.returncode == 0, with_library.stderr[-2000:]
    expected = _BiasAct()(torch.ones(1, 3)).tolist()
    assert json.loads(with_library.stdout)[0] == pytest.approx(expected[0])
