"""SRCNN super-resolution, as the chapter on dynamic inputs uses it.

The network follows the mmdeploy tutorial (chapters 1-2): upscale the image with
bicubic interpolation, then three convolutions (9x9 -> 64, 1x1 -> 32, 5x5 -> 3)
refine it.  Only the upscaling differs between the variants, so they all share one
state_dict (``conv1``, ``conv2``, ``conv3``; weights and biases):

``SRCNNStatic``
    ``nn.Upsample(scale_factor=3)``: the factor is part of the module.
``SRCNNItem``
    ``forward(x, upscale_factor)`` calls ``upscale_factor.item()``; tracing turns
    the factor into a constant (with a TracerWarning).
``SRCNNFunction``
    ``forward(x, scales)`` through ``DynamicResize``, a ``torch.autograd.Function``
    whose ``symbolic`` writes an ONNX ``Resize`` that takes ``scales`` from the
    graph's input.  Works with ``torch.onnx.export(..., dynamo=False)`` only.
``SRCNNCustomOp``
    ``forward(x, scales)`` through the custom operator ``tritonbook::resize_bicubic``;
    ``torch.onnx.export(..., dynamo=True, custom_translation_table=TRANSLATION_TABLE)``
    writes the same ``Resize`` (an opset-18 node; the file's opset is the exporter's
    default, 20 in torch 2.13, unless ``opset_version`` says otherwise).

``scales`` is a float32 tensor ``[1, 1, s, s]`` (one entry per NCHW dimension, as
ONNX ``Resize`` wants it).  Pixels are float32 in [0, 255], channels in OpenCV's
BGR order, as the tutorial feeds them (no normalisation).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tritonbook.checkpoints import state_dict_mismatch
from tritonbook.images import ASSETS

__all__ = [
    "SRCNN", "SRCNNStatic", "SRCNNItem", "SRCNNFunction", "SRCNNCustomOp", "VARIANTS",
    "DynamicResize", "resize_bicubic", "resize_bicubic_onnx", "TRANSLATION_TABLE",
    "bicubic_upscale", "scales_tensor",
    "SRCNNCheckpointError", "CHECKPOINT_PREFIX", "WEIGHTS_X3", "WEIGHTS_MULTISCALE",
    "load_srcnn_checkpoint", "save_srcnn_checkpoint",
    "image_to_tensor", "tensor_to_image", "to_rgb", "psnr", "exporter_failure",
]

# Resize attributes that reproduce torch's bicubic interpolation with align_corners=False.
RESIZE_ATTRIBUTES = {
    "coordinate_transformation_mode": "pytorch_half_pixel",
    "cubic_coeff_a": -0.75,
    "mode": "cubic",
    "nearest_mode": "floor",
}


def scales_tensor(factor: float) -> torch.Tensor:
    """The ``scales`` input for an upscale ``factor``: float32 ``[1, 1, factor, factor]``."""
    return torch.tensor([1.0, 1.0, float(factor), float(factor)], dtype=torch.float32)


def bicubic_upscale(x: torch.Tensor, factor: float | tuple[float, float]) -> torch.Tensor:
    """Upscale NCHW ``x`` by ``factor`` with the interpolation every variant uses.

    Bicubic (a = -0.75), ``align_corners=False``, no antialiasing; the output size is
    ``floor(size * factor)``, as in ONNX ``Resize``.
    """
    return F.interpolate(x, scale_factor=factor, mode="bicubic", align_corners=False)


class SRCNN(nn.Module):
    """The convolutional part of SRCNN; subclasses add the upscaling in front of it."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=9, padding=4)
        self.conv2 = nn.Conv2d(64, 32, kernel_size=1, padding=0)
        self.conv3 = nn.Conv2d(32, 3, kernel_size=5, padding=2)
        self.relu = nn.ReLU()

    def refine(self, upscaled: torch.Tensor) -> torch.Tensor:
        """The three convolutions, on an image that is already upscaled."""
        out = self.relu(self.conv1(upscaled))
        out = self.relu(self.conv2(out))
        return self.conv3(out)


class SRCNNStatic(SRCNN):
    """SRCNN with the factor fixed at construction (``nn.Upsample``): ``forward(x)``."""

    def __init__(self, upscale_factor: float = 3):
        super().__init__()
        self.upscale_factor = upscale_factor
        self.img_upsampler = nn.Upsample(scale_factor=upscale_factor, mode="bicubic", align_corners=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.refine(self.img_upsampler(x))


class SRCNNItem(SRCNN):
    """``forward(x, upscale_factor)`` with the factor read by ``.item()``.

    Runs correctly in eager mode, but a trace records the factor it saw as a constant.
    """

    def forward(self, x: torch.Tensor, upscale_factor: torch.Tensor) -> torch.Tensor:
        return self.refine(bicubic_upscale(x, upscale_factor.item()))


class DynamicResize(torch.autograd.Function):
    """Bicubic resize by a ``scales`` tensor, with an ONNX ``symbolic``
    for the legacy exporter.

    ``forward`` reads the last two entries of ``scales`` as Python
    numbers; ``symbolic`` emits ``Resize(input, roi=[], scales)`` so the
    exported graph keeps ``scales`` as an input. The TorchScript-based
    exporter (``dynamo=False``) calls ``symbolic``; the dynamo exporter
    ignores it and traces ``forward``, where ``tolist()`` gives symbolic
    numbers that the bicubic upsampling refuses.
    """

    @staticmethod
    def forward(ctx, input: torch.Tensor, scales: torch.Tensor):
        return bicubic_upscale(input, scales.tolist()[-2:])

    @staticmethod
    def symbolic(g, input, scales):
        no_roi = torch.tensor([], dtype=torch.float32)
        empty_roi = g.op("Constant", value_t=no_roi)
        attributes = RESIZE_ATTRIBUTES
        return g.op(
            "Resize",
            input,
            empty_roi,
            scales,
            coordinate_transformation_mode_s=attributes[
                "coordinate_transformation_mode"
            ],
            cubic_coeff_a_f=attributes["cubic_coeff_a"],
            mode_s=attributes["mode"],
            nearest_mode_s=attributes["nearest_mode"],
        )


class SRCNNFunction(SRCNN):
    """``forward(x, scales)`` through ``DynamicResize`` (legacy ONNX export keeps ``scales`` an input)."""

    def forward(self, x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        return self.refine(DynamicResize.apply(x, scales))


@torch.library.custom_op("tritonbook::resize_bicubic", mutates_args=())
def resize_bicubic(
    image: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """Bicubic resize of NCHW ``image`` by ``scales``
    (``[1, 1, s_h, s_w]``), as one opaque operator."""
    factors = tuple(float(s) for s in scales.tolist()[-2:])
    return bicubic_upscale(image, factors)


@resize_bicubic.register_fake
def _resize_bicubic_fake(image: torch.Tensor, scales: torch.Tensor):
    # The output height and width depend on the values in `scales`,
    # which tracing does not see: declare them as new data-dependent
    # sizes.
    ctx = torch.library.get_ctx()
    height = ctx.new_dynamic_size()
    width = ctx.new_dynamic_size()
    batch, channels = image.shape[0], image.shape[1]
    return image.new_empty((batch, channels, height, width))


class SRCNNCustomOp(SRCNN):
    """``forward(x, scales)`` through ``torch.ops.tritonbook.resize_bicubic`` (for the dynamo exporter)."""

    def forward(self, x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        return self.refine(resize_bicubic(x, scales))


def resize_bicubic_onnx(image, scales):
    """ONNX for ``tritonbook::resize_bicubic``: an opset-18 ``Resize``
    with the roi left out.

    The dynamo exporter calls it with symbolic values while it
    translates the graph (an entry of ``custom_translation_table``);
    the node it returns replaces the operator.
    """
    from onnxscript import opset18 as op

    return op.Resize(image, None, scales, **RESIZE_ATTRIBUTES)


# For torch.onnx.export(..., dynamo=True,
#                       custom_translation_table=TRANSLATION_TABLE).
TRANSLATION_TABLE = {
    torch.ops.tritonbook.resize_bicubic.default: resize_bicubic_onnx,
}

VARIANTS = {
    "static": SRCNNStatic,
    "item": SRCNNItem,
    "function": SRCNNFunction,
    "custom_op": SRCNNCustomOp,
}


# ---------------------------------------------------------------------------------
# Checkpoints in mmediting's layout
# ---------------------------------------------------------------------------------

CHECKPOINT_PREFIX = "generator."

# The book's own weights (tritonbook.train_srcnn; assets/README.md says how they were made).
WEIGHTS_X3 = ASSETS / "srcnn_x3.pth"
WEIGHTS_MULTISCALE = ASSETS / "srcnn_multiscale.pth"


class SRCNNCheckpointError(RuntimeError):
    """A checkpoint whose layout, keys or shapes do not fit the SRCNN being loaded."""


def _mismatch_report(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> str | None:
    missing, unexpected, wrong_shape = state_dict_mismatch(model.state_dict(), state_dict)
    if not (missing or unexpected or wrong_shape):
        return None
    lines = []
    if missing:
        lines.append("missing keys: " + ", ".join(missing))
    if unexpected:
        lines.append("unexpected keys: " + ", ".join(unexpected))
    if wrong_shape:
        lines.append("wrong shapes: " + "; ".join(wrong_shape))
    return "\n".join(lines)


def load_srcnn_checkpoint(path: str | os.PathLike, model: SRCNN) -> SRCNN:
    """Load an mmediting-layout checkpoint into ``model`` strictly; returns ``model`` in eval mode.

    The file is ``{'state_dict': {'generator.conv1.weight': ..., ...}}`` (the layout of
    the released ``srcnn.pth``), read with ``weights_only=True``.  As in the tutorial,
    the first component of every key is dropped (``'.'.join(k.split('.')[1:])``).
    A missing ``state_dict`` entry, a key without a prefix, or any missing, unexpected
    or wrongly shaped parameter raises ``SRCNNCheckpointError`` naming them.
    """
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, Mapping) or "state_dict" not in checkpoint:
        found = list(checkpoint)[:10] if isinstance(checkpoint, Mapping) else type(checkpoint).__name__
        raise SRCNNCheckpointError(f"{path}: expected a dict with a 'state_dict' entry, found {found}")
    raw = checkpoint["state_dict"]
    bare = [k for k in raw if "." not in k]
    if bare:
        raise SRCNNCheckpointError(f"{path}: keys without a wrapper prefix to strip: {', '.join(bare)}")
    state_dict = {".".join(k.split(".")[1:]): v for k, v in raw.items()}
    if len(state_dict) != len(raw):
        raise SRCNNCheckpointError(f"{path}: keys collide once their first component is stripped: {list(raw)}")
    problem = _mismatch_report(model, state_dict)
    if problem is not None:
        raise SRCNNCheckpointError(f"{path} does not fit {type(model).__name__}:\n{problem}")
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


def save_srcnn_checkpoint(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor], path: str | os.PathLike,
                          meta: Mapping[str, object] | None = None) -> None:
    """Write ``{'state_dict': {'generator.' + key: tensor}}`` (mmediting's layout), plus optional ``meta``.

    ``meta`` should hold only plain values (str, int, float, lists, dicts) so the file
    stays loadable with ``weights_only=True``.
    """
    state_dict = (model_or_state_dict.state_dict() if isinstance(model_or_state_dict, nn.Module)
                  else model_or_state_dict)
    checkpoint: dict[str, object] = {
        "state_dict": {CHECKPOINT_PREFIX + k: v.detach().cpu().clone().contiguous() for k, v in state_dict.items()}
    }
    if meta:
        checkpoint["meta"] = _plain(dict(meta))
    torch.save(checkpoint, path)


def _plain(value):
    """``value`` as built-in types only, which ``torch.load(weights_only=True)`` accepts."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, str):            # e.g. torch.__version__, a str subclass
        return str(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"checkpoint meta must hold plain values, not {type(value).__name__}: {value!r}")


# ---------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------

def image_to_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 (H, W, 3) image, as cv2.imread gives it (BGR) -> float32 (1, 3, H, W) in [0, 255]."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected a uint8 image of shape (H, W, 3), got {image.dtype} {image.shape}")
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().unsqueeze(0).contiguous()


def tensor_to_image(tensor: torch.Tensor | np.ndarray) -> np.ndarray:
    """(1, 3, H, W) or (3, H, W) float in [0, 255] -> uint8 (H, W, 3), clipped and rounded.

    (The tutorial truncates with ``astype(np.uint8)`` after clipping; rounding is
    closer to the float values, by half a grey level on average.)
    """
    array = tensor.detach().float().cpu().numpy() if isinstance(tensor, torch.Tensor) else np.asarray(tensor)
    if array.ndim == 4:
        if array.shape[0] != 1:
            raise ValueError(f"expected one image, got a batch of {array.shape[0]}")
        array = array[0]
    if array.ndim != 3 or array.shape[0] != 3:
        raise ValueError(f"expected (1, 3, H, W) or (3, H, W), got {array.shape}")
    array = np.clip(np.rint(array), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(array.transpose(1, 2, 0))


def to_rgb(image: torch.Tensor | np.ndarray) -> np.ndarray:
    """A BGR tensor (as ``tensor_to_image`` takes it) or BGR uint8 image -> RGB uint8, for display."""
    if isinstance(image, torch.Tensor):
        image = tensor_to_image(image)
    return image[:, :, ::-1]


def psnr(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB between two images on the 0..255 scale (peak 255).

    Takes uint8 images or floats in [0, 255], in any layout as long as both match.
    The mean squared error runs over all pixels and all three colour channels (no
    conversion to luma Y, so values are lower than the Y-channel PSNRs in SR papers),
    without cropping a border.  Identical images give ``inf``.
    """
    x = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    y = b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    if x.shape != y.shape:
        raise ValueError(f"shapes differ: {x.shape} vs {y.shape}")
    mse = float(np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else float(10.0 * np.log10(255.0 ** 2 / mse))


# ---------------------------------------------------------------------------------
# onnxruntime, and the chapter's table of factors
# ---------------------------------------------------------------------------------

def onnx_providers() -> list[str]:
    """onnxruntime's execution providers for this machine, best first: the CUDA provider
    when torch sees a GPU and the installed onnxruntime has it (onnxruntime-gpu's needs
    CUDA 13 and cuDNN 9), then the CPU provider, which every build has."""
    import onnxruntime as ort

    cuda = torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers()
    return ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]


def onnx_session(path: str | os.PathLike):
    """An onnxruntime session on ``path`` with ``onnx_providers()``."""
    import onnxruntime as ort

    return ort.InferenceSession(os.fspath(path), providers=onnx_providers())


RESIZE_SLOTS = ("X", "roi", "scales", "sizes")


def resize_inputs(model) -> dict[str, tuple[str, str]]:
    """Where each input of the graph's one ``Resize`` node comes from, as Netron shows it
    when the node is clicked: ``{slot: (tensor name, source)}`` for the slots X, roi,
    scales and sizes, the source being ``"constant [..]"`` (an initializer or a Constant
    node, with its value), ``"graph input"``, ``"computed in the graph"`` or
    ``"(absent)"``. ValueError unless the graph has exactly one ``Resize``."""
    from onnx import numpy_helper

    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    resizes = [node for node in graph.node if node.op_type == "Resize"]
    if len(resizes) != 1:
        raise ValueError(f"expected one Resize node, found {len(resizes)}")
    graph_inputs = {i.name for i in graph.input}
    sources = {}
    for slot, name in zip(RESIZE_SLOTS, resizes[0].input):
        if name in constants:
            source = f"constant {constants[name].tolist()}"
        elif name in graph_inputs:
            source = "graph input"
        else:
            source = "computed in the graph" if name else "(absent)"
        sources[slot] = (name, source)
    return sources


def describe_resize(model) -> str:
    """``resize_inputs`` as lines of text, one per slot."""
    return "\n".join(f"  Resize.{slot:<6} <- {name or '-':<12} {source}"
                     for slot, (name, source) in resize_inputs(model).items())


def psnr_table(runs: Mapping[float, tuple[torch.Tensor, torch.Tensor, torch.Tensor, object]],
               compared: str = "max |ORT - torch|"):
    """One row per factor from ``{factor: (low, high, output, parity report)}``: the
    sizes, the report's largest difference (in the column ``compared``), and the PSNR
    against the original (``high``) of plain bicubic upscaling and of SRCNN, with
    SRCNN's gain."""
    import pandas as pd

    rows = []
    for factor, (low, high, out, report) in runs.items():
        original = tensor_to_image(high)
        rows.append({
            "factor": factor,
            "input": f"{low.shape[-2]}x{low.shape[-1]}",
            "output": f"{out.shape[-2]}x{out.shape[-1]}",
            compared: report.max_abs,
            "PSNR bicubic (dB)": psnr(tensor_to_image(bicubic_upscale(low, factor)), original),
            "PSNR SRCNN (dB)": psnr(tensor_to_image(out), original),
        })
    table = pd.DataFrame(rows).set_index("factor")
    table["gain (dB)"] = table["PSNR SRCNN (dB)"] - table["PSNR bicubic (dB)"]
    return table


def exporter_failure(error: BaseException) -> tuple[str, str]:
    """The first line of a ``torch.onnx.export`` failure and the line naming its cause
    (the one that starts with ``<class``), without the terminal colour codes the
    exporter puts in its report."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    cause = next((line for line in lines if line.startswith("<class")), "")
    return lines[0], cause
