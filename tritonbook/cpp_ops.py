"""GFPGAN's two custom ops as real compiled C++ (and CUDA) extension ops.

Upstream GFPGAN runs two StyleGAN2 operations from BasicSR as compiled
extensions: ``fused_leaky_relu`` (bias + leaky ReLU + gain in one kernel) and
``upfirdn2d`` (upsample, FIR filter, downsample).  This module builds the same
kind of thing from the C++ sources in ``tritonbook/csrc`` with
``torch.utils.cpp_extension.load`` and wraps each kernel in a
``torch.autograd.Function``, the way BasicSR does, so that the network trains
and runs on it exactly as it does on the plain-PyTorch versions in
:mod:`tritonbook.gfpgan`.

The book uses it to show the problem: ``torch.jit.trace`` records each
``autograd.Function`` call as an opaque Python operation (``prim::PythonOp``),
and saving the traced module then fails with "Could not export Python function
call ...".  The fix is the plain-PyTorch versions.  Swap the ops in with::

    from tritonbook.cpp_ops import fused_leaky_relu_ext, upfirdn2d_ext
    with use_ops(fused_leaky_relu=fused_leaky_relu_ext, upfirdn2d=upfirdn2d_ext):
        image, _ = model(x)

The first call compiles the extension (about half a minute; needs a C++
compiler and ninja) into ``$TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``); later processes reuse the build.  CUDA kernels
are compiled in only when PyTorch sees a GPU and ``nvcc`` is found.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from types import ModuleType

import torch
from torch.autograd import Function

from tritonbook import device

__all__ = [
    "build_op_library",
    "load_extension",
    "extension_info",
    "FusedLeakyReLUFunction",
    "FusedLeakyReLUFunctionBackward",
    "UpFirDn2dFunction",
    "fused_leaky_relu_ext",
    "upfirdn2d_ext",
    "float_instructions",
]

#: The C++/CUDA sources, next to this package.
CSRC = Path(__file__).resolve().parent / "csrc"
CPU_SOURCES = ("fused_bias_act.cpp", "upfirdn2d.cpp")
CUDA_SOURCES = ("fused_bias_act_cuda.cu", "upfirdn2d_cuda.cu")
EXTENSION_NAME = "tritonbook_gfpgan_ops"

_lock = threading.Lock()
_extension: ModuleType | None = None
_built_cuda = False


def _cuda_toolkit() -> tuple[str | None, str]:
    """(nvcc's path, "") if CUDA kernels can and should be built here, else (None, why not)."""
    if not torch.version.cuda:
        return None, "this PyTorch is a CPU-only build"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA GPU"
    if device.selected() != "cuda":
        return None, f"{device.VARIABLE}=cpu: this run keeps to the CPU"
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if home is None:
        return None, "no CUDA toolkit found (set CUDA_HOME to the folder with bin/nvcc)"
    nvcc = Path(home) / "bin" / "nvcc"
    if not nvcc.is_file():
        return None, f"no nvcc at {nvcc}"
    return str(nvcc), ""


def _missing_compiler() -> str | None:
    """What to install when the C++ compiler (``$CXX``, else ``c++``) is not on PATH."""
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is not None:
        return None
    source = "named by $CXX" if "CXX" in os.environ else "the compiler torch uses when $CXX is not set"
    return f"a C++ compiler ({cxx!r}, {source}, is not on PATH; install g++, e.g. apt-get install g++)"


def _missing_tools() -> list[str]:
    from torch.utils import cpp_extension

    missing = [compiler] if (compiler := _missing_compiler()) else []
    if not cpp_extension.is_ninja_available():
        missing.append("ninja (the build tool torch.utils.cpp_extension.load uses; pip install ninja "
                       "or apt-get install ninja-build)")
    return missing


def load_extension(verbose: bool = False) -> ModuleType:
    """Compile (first time) and import the extension; cached for the rest of the process.

    Raises RuntimeError naming what is missing when there is no C++ compiler or
    no ninja.  ``verbose`` shows the compiler commands and output.
    """
    global _extension, _built_cuda
    with _lock:
        if _extension is not None:
            return _extension
        missing = _missing_tools()
        if missing:
            raise RuntimeError("cannot build the GFPGAN C++ extension: missing " + "; and ".join(missing))

        from torch.utils import cpp_extension

        sources = [str(CSRC / s) for s in CPU_SOURCES]
        # at::parallel_for only runs in parallel when the extension is compiled
        # with OpenMP, like PyTorch itself (it reuses the libgomp torch loaded).
        cflags = ["-O3", "-fopenmp"]
        name = EXTENSION_NAME
        cuda = _cuda_toolkit()[0] is not None
        if cuda:
            sources += [str(CSRC / s) for s in CUDA_SOURCES]
            cflags.append("-DWITH_CUDA")
            name += "_cuda"  # a separate build, so CPU-only and GPU processes do not rebuild each other's
        _extension = cpp_extension.load(
            name=name,
            sources=sources,
            extra_cflags=cflags,
            extra_cuda_cflags=["-O3", "-DWITH_CUDA"] if cuda else None,
            extra_ldflags=["-fopenmp"],
            with_cuda=cuda,
            verbose=verbose,
        )
        _built_cuda = bool(_extension.built_with_cuda())
        return _extension


OP_LIBRARY_SOURCE = "fused_leaky_relu_op.cpp"
OP_LIBRARY_NAME = "libtritonbook_ops.so"


def build_op_library(verbose: bool = False) -> Path:
    """Compile ``csrc/fused_leaky_relu_op.cpp`` into a shared library that registers
    ``tritonbook::fused_leaky_relu`` with PyTorch, and return its path.

    Built with the C++ compiler directly, the way a library for the container is
    built (CMake's ``find_package(Torch)`` gives the same flags): against libtorch
    alone. ``torch.utils.cpp_extension`` would also link ``libtorch_python``, whose
    symbols only a process with libpython can resolve, so tritonserver could not
    preload it. The build is kept under ``$TORCH_EXTENSIONS_DIR`` (default
    ``~/.cache/torch_extensions``) in a folder named by a hash of the source, the
    compiler command and the torch version, and reused while those stay the same.
    Loading the library (``torch.ops.load_library``) is left to the caller.
    """
    import hashlib
    import subprocess

    from torch.utils import cpp_extension

    if (missing := _missing_compiler()) is not None:
        raise RuntimeError(f"cannot build the op library: missing {missing}")
    cxx = os.environ.get("CXX", "c++")
    source = CSRC / OP_LIBRARY_SOURCE
    abi = int(torch.compiled_with_cxx11_abi())
    flags = ["-O2", "-fPIC", "-shared", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
             *(f"-I{path}" for path in cpp_extension.include_paths()),
             str(source),
             *(f"-L{path}" for path in cpp_extension.library_paths()),
             "-lc10", "-ltorch_cpu", "-ltorch"]
    digest = hashlib.sha256(
        "\0".join([source.read_text(), cxx, *flags, torch.__version__]).encode()).hexdigest()[:16]
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR")
                or Path.home() / ".cache" / "torch_extensions")
    library = root / f"tritonbook_op_library_{digest}" / OP_LIBRARY_NAME
    with _lock:
        if library.exists():
            return library
        library.parent.mkdir(parents=True, exist_ok=True)
        partial = library.with_suffix(f".{os.getpid()}.part")
        done = subprocess.run([cxx, *flags, "-o", str(partial)], capture_output=True, text=True,
                              check=False)
        if verbose or done.returncode != 0:
            said = (done.stdout + done.stderr).strip()
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                raise RuntimeError(f"building {OP_LIBRARY_NAME} failed:\n{said[-3000:]}")
            print(said)
        partial.replace(library)  # whole or not at all, for a process that reads it
        return library


def extension_info() -> dict[str, object]:
    """What was built, for printing.

    Keys: ``name`` (the module), ``kernels`` (``["cpu"]`` or ``["cpu", "cuda"]``),
    ``cuda`` (why the CUDA kernels are missing, or "built"), ``build_dir`` and
    ``library``.  Builds the extension if that has not happened yet in this process.
    """
    ext = load_extension()
    library = Path(ext.__file__)
    return {
        "name": ext.__name__,
        "kernels": ["cpu", "cuda"] if _built_cuda else ["cpu"],
        "cuda": "built" if _built_cuda else f"not built: {_cuda_toolkit()[1] or 'built without -DWITH_CUDA'}",
        "build_dir": str(library.parent),
        "library": library.name,
    }


# ---------------------------------------------------------------------------
# fused_leaky_relu: two Functions, so that the backward is differentiable too
# ---------------------------------------------------------------------------

def _bias_view(bias: torch.Tensor, ndim: int) -> torch.Tensor:
    return bias.view([1, bias.shape[0]] + [1] * (ndim - 2))


class FusedLeakyReLUFunctionBackward(Function):
    """The backward of :class:`FusedLeakyReLUFunction`, as a Function of its own (for double backward).

    Inputs: ``grad_output`` and the forward's output ``out``; returns
    ``(grad_input, grad_bias)`` with ``grad_input = grad_output * scale * (out > 0 ? 1 : slope)``
    and ``grad_bias`` = ``grad_input`` summed over every dimension but 1.
    """

    @staticmethod
    def forward(ctx, grad_output, out, negative_slope, scale):
        ctx.save_for_backward(out)
        ctx.negative_slope = negative_slope
        ctx.scale = scale
        grad_input = load_extension().fused_bias_act_backward(grad_output, out, negative_slope, scale)
        dims = [0] + list(range(2, grad_output.dim()))
        grad_bias = grad_input.sum(dims)
        return grad_input, grad_bias

    @staticmethod
    def backward(ctx, gradgrad_input, gradgrad_bias):
        (out,) = ctx.saved_tensors
        # grad_input is linear in grad_output (out only picks the slope), so the
        # gradient w.r.t. grad_output is the same kernel applied to the incoming
        # gradients; w.r.t. out it is zero almost everywhere.
        incoming = gradgrad_input + _bias_view(gradgrad_bias, gradgrad_input.dim())
        gradgrad_out = FusedLeakyReLUFunctionBackward.apply(incoming, out, ctx.negative_slope, ctx.scale)[0]
        return gradgrad_out, None, None, None


class FusedLeakyReLUFunction(Function):
    """``scale * leaky_relu(x + bias, negative_slope)`` on the compiled
    kernel (bias may be None)."""

    @staticmethod
    def forward(ctx, input, bias, negative_slope, scale):
        out = load_extension().fused_bias_act(
            input, bias, negative_slope, scale
        )
        ctx.save_for_backward(out)
        ctx.has_bias = bias is not None
        ctx.negative_slope = negative_slope
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (out,) = ctx.saved_tensors
        grad_input, grad_bias = FusedLeakyReLUFunctionBackward.apply(
            grad_output.contiguous(), out, ctx.negative_slope, ctx.scale
        )
        if not ctx.has_bias:
            grad_bias = None
        # No gradient for negative_slope and scale: plain numbers.
        return grad_input, grad_bias, None, None


def fused_leaky_relu_ext(x: torch.Tensor, bias: torch.Tensor | None, negative_slope: float = 0.2,
                         scale: float = 2 ** 0.5) -> torch.Tensor:
    """Drop-in for :func:`tritonbook.gfpgan.fused_leaky_relu` on the compiled kernel."""
    return FusedLeakyReLUFunction.apply(x, bias, float(negative_slope), float(scale))


# ---------------------------------------------------------------------------
# upfirdn2d: the backward is itself an upfirdn2d
# ---------------------------------------------------------------------------

def _backward_pads(in_size: int, out_size: int, k: int, up: int, down: int, pad0: int) -> tuple[int, int]:
    """Pads of the upfirdn2d that computes the gradient along one axis.

    Forward, per axis: ``out[o] = sum_k kernel[K-1-k] * u[o*down + k - pad0]``,
    ``u`` the input with ``up - 1`` zeros inserted.  Collecting, for each input
    sample ``x[i] = u[i*up]``, every ``(o, k)`` that read it gives::

        grad_x[i] = sum_k' kernel[k'] * v[i*up + k' - (K-1-pad0)]

    where ``v`` is ``grad_out`` with ``down - 1`` zeros inserted: an upfirdn2d of
    ``grad_out`` with the flipped kernel, up and down swapped and a leading pad
    ``K - 1 - pad0``.  The trailing pad makes its output exactly ``in_size`` long:
    ``out_size*down + pad0' + pad1' - K = (in_size - 1)*up``.
    """
    g_pad0 = k - 1 - pad0
    g_pad1 = (in_size - 1) * up - out_size * down + pad0 + 1
    return g_pad0, g_pad1


class UpFirDn2dFunction(Function):
    """upfirdn2d on the compiled kernel, with separate factors and pads per axis.

    ``up``, ``down``: ``(x, y)``; ``pad``: ``(x0, x1, y0, y1)``.  The kernel is a
    constant (no gradient), as upstream.  The backward calls this same Function
    (the adjoint of an upfirdn2d is an upfirdn2d), so it can be differentiated
    again, any number of times.
    """

    @staticmethod
    def forward(ctx, input, kernel, up, down, pad):
        (up_x, up_y), (down_x, down_y) = up, down
        pad_x0, pad_x1, pad_y0, pad_y1 = pad
        out = load_extension().upfirdn2d(input, kernel, up_x, up_y, down_x, down_y, pad_x0, pad_x1, pad_y0, pad_y1)
        ctx.save_for_backward(kernel)
        ctx.up, ctx.down, ctx.pad = up, down, pad
        ctx.in_size = (input.shape[3], input.shape[2])   # (w, h)
        ctx.out_size = (out.shape[3], out.shape[2])
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (kernel,) = ctx.saved_tensors
        (up_x, up_y), (down_x, down_y) = ctx.up, ctx.down
        pad_x0, _, pad_y0, _ = ctx.pad
        k_h, k_w = kernel.shape
        g_pad_x = _backward_pads(ctx.in_size[0], ctx.out_size[0], k_w, up_x, down_x, pad_x0)
        g_pad_y = _backward_pads(ctx.in_size[1], ctx.out_size[1], k_h, up_y, down_y, pad_y0)
        grad_input = UpFirDn2dFunction.apply(grad_output.contiguous(), torch.flip(kernel, [0, 1]).contiguous(),
                                             (down_x, down_y), (up_x, up_y), g_pad_x + g_pad_y)
        return grad_input, None, None, None, None


def _pair(value, what: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if len(value) == 2:
        return int(value[0]), int(value[1])
    raise ValueError(f"upfirdn2d_ext: {what} must be an int or an (x, y) pair, got {value!r}")


def upfirdn2d_ext(x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1,
                  pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """Drop-in for :func:`tritonbook.gfpgan.upfirdn2d` on the compiled kernel.

    Also accepts ``(x, y)`` pairs for ``up``/``down`` and the four-value
    ``pad=(x0, x1, y0, y1)`` of upstream.  The kernel is converted to the
    input's device and dtype.
    """
    if len(pad) == 2:
        pad = (int(pad[0]), int(pad[1]), int(pad[0]), int(pad[1]))
    elif len(pad) == 4:
        pad = tuple(int(p) for p in pad)
    else:
        raise ValueError(f"upfirdn2d_ext: pad must be (p0, p1) or (x0, x1, y0, y1), got {pad!r}")
    kernel = kernel.detach().to(device=x.device, dtype=x.dtype).contiguous()
    return UpFirDn2dFunction.apply(x, kernel, _pair(up, "up"), _pair(down, "down"), pad)


def float_instructions(kernel: str = "forward_cpu_kernelIf") -> dict[str, int]:
    """How the compiled CPU kernel does its float arithmetic, read from its machine code.

    Disassembles the built extension with ``objdump`` and counts, in the OpenMP body of
    the kernel whose mangled name contains ``kernel``, the SSE/AVX float instructions:
    ``scalar`` ones (``...ss``: one float at a time) and ``packed`` ones (``...ps``: 4, 8
    or 16 floats at a time), plus the conditional jumps. A loop with only scalar
    instructions was not vectorised by the compiler.
    """
    import re
    import subprocess

    objdump = shutil.which("objdump")
    if objdump is None:
        raise RuntimeError("objdump (binutils) is not installed")
    library = load_extension().__file__
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", library], capture_output=True,
                             text=True, check=True).stdout
    bodies = [block for block in listing.split("\n\n")
              if kernel in block.split("\n", 1)[0] and "_omp_fn" in block.split("\n", 1)[0]
              and ".cold" not in block.split("\n", 1)[0]]
    if len(bodies) != 1:
        raise RuntimeError(f"expected one OpenMP body for {kernel!r}, found {len(bodies)}")
    mnemonics = re.findall(r"^\s*[0-9a-f]+:\s+(\S+)", bodies[0], flags=re.MULTILINE)
    arithmetic = ("add", "sub", "mul", "div", "max", "min", "cmp", "comi", "ucomi")
    counts = {"scalar": 0, "packed": 0, "conditional jumps": 0}
    for name in mnemonics:
        bare = name[1:] if name.startswith("v") else name
        if bare.endswith("ss") and bare[:-2] in arithmetic:
            counts["scalar"] += 1
        elif bare.endswith("ps") and bare[:-2] in arithmetic:
            counts["packed"] += 1
        elif name.startswith("j") and name != "jmp":
            counts["conditional jumps"] += 1
    return counts


# Extra upfirdn2d configurations the network does not use: (C, H, W), kernel, up, down, pad.
EXTRA_UPFIRDN2D_CASES = [((16, 32, 32), (4, 4), 1, 2, (1, 1)),  # downsample by 2
                         ((16, 31, 17), (3, 3), 2, 2, (-1, 2)),  # up and down, crop, odd sizes
                         ((16, 32, 32), (1, 1), 1, 1, (0, 0))]  # identity


def parity_cases(calls: dict, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """Chapter 1's parity grid: each op call recorded in ``calls`` (by shape and
    configuration, at batch 2), plus a 2-D activation and ``EXTRA_UPFIRDN2D_CASES``.

    Yields ``(op, case, (c_plus_plus, pytorch), inputs, grad_inputs)``: the C++ op and
    its plain-PyTorch rewrite, random inputs on ``device``, and the inputs whose
    gradients are compared.
    """
    from tritonbook.gfpgan import fused_leaky_relu, make_resample_kernel, upfirdn2d

    def random(*shape):
        return torch.randn(shape, device=device, dtype=dtype)

    activation_shapes = sorted({shape for shape, *_ in calls["fused_leaky_relu"]}, key=len)
    for shape in activation_shapes + [(4, 512)]:
        x, bias = random(2, *shape[1:]), random(shape[1])
        yield ("fused_leaky_relu", f"{len(shape)}-D {tuple(x.shape)}",
               (fused_leaky_relu_ext, fused_leaky_relu), [x, bias], [x, bias])
    recorded = {(shape[1:], k, up, down, pad) for shape, k, up, down, pad in calls["upfirdn2d"]}
    for shape, k, up, down, pad in sorted(recorded) + EXTRA_UPFIRDN2D_CASES:
        x = random(2, *shape)
        kernel = make_resample_kernel([1, 3, 3, 1]) if k == (4, 4) else torch.rand(k)
        kernel = kernel.to(device=device, dtype=dtype)
        ops = (lambda t, kk=kernel, u=up, d=down, p=pad: upfirdn2d_ext(t, kk, u, d, p),
               lambda t, kk=kernel, u=up, d=down, p=pad: upfirdn2d(t, kk, u, d, p))
        yield ("upfirdn2d", f"{tuple(x.shape)} k{k} up{up} down{down} pad{pad}", ops, [x], [x])


def largest_differences(reference_op, candidate_op, inputs: list[torch.Tensor],
                        grad_inputs: list[torch.Tensor],
                        relative: bool = False) -> tuple[float, float]:
    """The largest absolute difference between two implementations of one op, forward
    and backward: each runs on its own copy of ``inputs``, and both get the same random
    upstream gradient. ``grad_inputs`` are the inputs (from ``inputs``, by identity)
    whose gradients are compared. Returns ``(forward, backward)``.

    ``relative``: each difference divided by the largest magnitude in the reference's
    tensor, so that one tolerance fits tensors of any size. A gradient can be large (a
    bias gradient sums over batch and pixels), and in float16 the gap between
    neighbouring numbers grows with their size (2 between 2048 and 4096): two correct
    kernels that add in another order differ by whole steps (book/gpu.md)."""
    wants = [any(t is g for g in grad_inputs) for t in inputs]
    a = [t.detach().clone().requires_grad_(w) for t, w in zip(inputs, wants)]
    b = [t.detach().clone().requires_grad_(w) for t, w in zip(inputs, wants)]
    out_a, out_b = reference_op(*a), candidate_op(*b)
    upstream = torch.randn_like(out_a)
    (out_a * upstream).sum().backward()
    (out_b * upstream).sum().backward()
    grads = []
    for index, (x, y) in enumerate(zip(a, b)):
        if not wants[index]:
            continue
        if x.grad is None or y.grad is None:
            side = "reference" if x.grad is None else "candidate"
            raise ValueError(f"input {index}: its gradient is compared, but the {side} op gives it none")
        grads.append(_difference(x.grad, y.grad, relative))
    return _difference(out_a, out_b, relative), max(grads, default=0.0)


def _difference(reference: torch.Tensor, candidate: torch.Tensor, relative: bool) -> float:
    largest = (reference - candidate).abs().max().item()
    if not relative:
        return largest
    scale = reference.abs().max().item()
    return largest / scale if scale > 0 else largest
