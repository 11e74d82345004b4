"""GFPGAN v1 in plain PyTorch: the network the book deploys.

GFPGAN (Wang et al., "Towards Real-World Blind Face Restoration with Generative
Facial Prior", CVPR 2021) is a U-Net whose decoder half produces per-resolution
*conditions* (scale and shift maps) for a pretrained StyleGAN2 generator.  The
generator is modulated by those maps (Spatial Feature Transform, "SFT") and by a
style code predicted from the U-Net bottleneck.

This file is a fresh implementation of the architecture of TencentARC/GFPGAN
(``GFPGANv1``) and of the StyleGAN2 pieces it borrows from BasicSR.  It keeps the
same module names and parameter shapes, so ``GFPGANv1.pth`` (the released
checkpoint) loads into it with ``strict=True``, and it keeps the original
``forward`` behaviour -- including the parts that get in the way of export
(fresh random noise, ``torch.save``/``torch.load`` of the conditions, ``.cuda()``),
because later chapters take them apart one by one.

Two custom operations exist as CUDA extensions upstream: ``fused_leaky_relu``
and ``upfirdn2d``.  Here both are plain PyTorch functions.  The modules never
call them directly: they go through the module-level ``OPS`` object, so a
chapter can plug in another implementation (a compiled extension wrapped in an
``autograd.Function``, say) with::

    with use_ops(fused_leaky_relu=my_flrelu, upfirdn2d=my_upfirdn2d):
        image, _ = model(x)

Tensors are NCHW, RGB, in [-1, 1] on the way in; the output image is nominally
in the same range (the network does not clamp; callers usually do).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from tritonbook.checkpoints import state_dict_mismatch
from tritonbook.images import ASSETS

__all__ = [
    "OPS",
    "use_ops",
    "fused_leaky_relu",
    "upfirdn2d",
    "GFPGANv1",
    "GFPGANForDeploy",
    "StyleGAN2GeneratorSFT",
    "CheckpointMismatchError",
    "RELEASED_V1_CONFIG",
    "build_gfpgan",
    "load_gfpgan",
    "checkpoint_out_size",
    "weights_path",
    "gfpgan_from_environment",
    "STAND_IN_NARROW",
]

# The configuration GFPGANv1.pth was trained with (out_size aside, these are
# also this file's defaults; the upstream class has different defaults).
RELEASED_V1_CONFIG = dict(
    out_size=512,
    num_style_feat=512,
    channel_multiplier=1,
    num_mlp=8,
    input_is_latent=True,
    different_w=True,
    narrow=1,
    sft_half=True,
    fix_decoder=True,
)

# The random stand-in's width: GFPGANv1's own ``narrow`` option at one half, which
# halves every layer's channels (a face in about a third of the released width's time
# on a 2-core CPU at 256 pixels). Nothing the chapters teach depends on the width;
# their run time on two CPU cores does, since most of it is GFPGAN answering. A real
# checkpoint keeps its width.
STAND_IN_NARROW = 0.5

# Environment variable that may name a real checkpoint (see gfpgan_from_environment).
WEIGHTS_ENV = "GFPGAN_WEIGHTS"
# Where a reader may drop the released checkpoint instead (never committed).
ASSET_WEIGHTS = ASSETS / "GFPGANv1.pth"


# ---------------------------------------------------------------------------
# The two "custom" operations, in plain PyTorch
# ---------------------------------------------------------------------------

def fused_leaky_relu(x: torch.Tensor, bias: torch.Tensor | None, negative_slope: float = 0.2,
                     scale: float = 2 ** 0.5) -> torch.Tensor:
    """``scale * leaky_relu(x + bias, negative_slope)``, with ``bias`` added along dim 1.

    Works for any input with at least two dimensions: (N, C) from a linear layer,
    (N, C, H, W) from a convolution.  ``bias`` has shape (C,) or is None.
    """
    if bias is not None:
        # (C,) -> (1, C, 1, ..., 1) so it broadcasts over batch and spatial dims.
        shape = [1, bias.shape[0]] + [1] * (x.dim() - 2)
        x = x + bias.view(shape)
    return F.leaky_relu(x, negative_slope) * scale


def upfirdn2d(x: torch.Tensor, kernel: torch.Tensor, up: int = 1, down: int = 1,
              pad: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """Upsample, FIR-filter and downsample every channel of an NCHW tensor.

    The steps, applied identically to the height and the width axis:

    1. upsample by inserting ``up - 1`` zeros after every sample (length ``n * up``);
    2. pad ``pad[0]`` zeros before and ``pad[1]`` after; a negative pad crops;
    3. convolve (true convolution, i.e. correlation with the flipped kernel),
       keeping only "valid" positions;
    4. keep every ``down``-th sample.

    Output size per axis: ``(n * up + pad[0] + pad[1] - k) // down + 1``.
    """
    pad0, pad1 = int(pad[0]), int(pad[1])
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    out = x

    # 1. zero insertion: view as (n, c, h, 1, w, 1), pad to (n, c, h, up, w, up).
    if up > 1:
        out = out.reshape(n, c, h, 1, w, 1)
        out = F.pad(out, [0, up - 1, 0, 0, 0, up - 1])
        out = out.reshape(n, c, h * up, w * up)

    # 2. padding: F.pad takes the last dimension first; negative pads are
    #    done as an explicit crop, which keeps them obvious.
    out = F.pad(out, [max(pad0, 0), max(pad1, 0), max(pad0, 0), max(pad1, 0)])
    height, width = out.shape[2], out.shape[3]
    out = out[:, :, max(-pad0, 0): height - max(-pad1, 0), max(-pad0, 0): width - max(-pad1, 0)]

    # 3 + 4. one depthwise convolution filters every channel with the same kernel
    #        (groups=c: the channel count is fixed by the architecture). conv2d
    #        correlates, so the kernel is flipped for a true convolution; the
    #        stride does the downsampling.
    #        The kernel must already be on x's device and dtype: a ``.to(x.device)``
    #        here would be recorded by torch.jit.trace as a constant device (chapter 3).
    weight = torch.flip(kernel, [0, 1]).reshape(1, 1, kh, kw).expand(c, 1, kh, kw)
    return F.conv2d(out, weight, stride=down, groups=c)


class _Ops:
    """The implementations the modules call; swap them with ``use_ops``."""

    def __init__(self) -> None:
        self.fused_leaky_relu: Callable[..., torch.Tensor] = fused_leaky_relu
        self.upfirdn2d: Callable[..., torch.Tensor] = upfirdn2d
        # True: modulated convolutions run as one grouped conv (upstream); False: shared
        # weight with scaled input and output (batch-size agnostic when traced).
        self.fused_modconv: bool = True

    def __repr__(self) -> str:
        return (f"Ops(fused_leaky_relu={self.fused_leaky_relu.__module__}.{self.fused_leaky_relu.__name__}, "
                f"upfirdn2d={self.upfirdn2d.__module__}.{self.upfirdn2d.__name__}, "
                f"fused_modconv={self.fused_modconv})")


#: Module-level switchboard: ``OPS.fused_leaky_relu`` and ``OPS.upfirdn2d``.
OPS = _Ops()


@contextlib.contextmanager
def use_ops(fused_leaky_relu: Callable | None = None, upfirdn2d: Callable | None = None,
            fused_modconv: bool | None = None) -> Iterator[_Ops]:
    """Temporarily replace one or both custom ops (same signatures as the plain versions),
    or choose how modulated convolutions run (``fused_modconv``, see ``ModulatedConv2d``).

    Restores the previous settings on exit, even after an error.  The switch is
    global to the process: do not run models with different settings in
    parallel threads.  Assigning ``OPS.upfirdn2d = ...`` directly also works, for
    a permanent swap.
    """
    saved = (OPS.fused_leaky_relu, OPS.upfirdn2d, OPS.fused_modconv)
    try:
        if fused_leaky_relu is not None:
            OPS.fused_leaky_relu = fused_leaky_relu
        if upfirdn2d is not None:
            OPS.upfirdn2d = upfirdn2d
        if fused_modconv is not None:
            OPS.fused_modconv = fused_modconv
        yield OPS
    finally:
        OPS.fused_leaky_relu, OPS.upfirdn2d, OPS.fused_modconv = saved


# ---------------------------------------------------------------------------
# StyleGAN2 building blocks (BasicSR layout)
# ---------------------------------------------------------------------------

def make_resample_kernel(k) -> torch.Tensor:
    """2-D FIR kernel from a 1-D one (outer product), normalised to sum to 1."""
    k = torch.tensor(k, dtype=torch.float32)
    if k.dim() == 1:
        k = k[None, :] * k[:, None]
    return k / k.sum()


def _channels(narrow: float, channel_multiplier: int) -> dict[str, int]:
    """Feature width at each resolution, StyleGAN2 style (keys are sizes as strings)."""
    return {
        "4": int(512 * narrow),
        "8": int(512 * narrow),
        "16": int(512 * narrow),
        "32": int(512 * narrow),
        "64": int(256 * channel_multiplier * narrow),
        "128": int(128 * channel_multiplier * narrow),
        "256": int(64 * channel_multiplier * narrow),
        "512": int(32 * channel_multiplier * narrow),
        "1024": int(16 * channel_multiplier * narrow),
    }


class FusedLeakyReLU(nn.Module):
    """Bias + leaky ReLU + sqrt(2) gain; the bias (one per channel) is the only parameter."""

    def __init__(self, channels: int, negative_slope: float = 0.2, scale: float = 2 ** 0.5):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return OPS.fused_leaky_relu(x, self.bias, self.negative_slope, self.scale)


class ScaledLeakyReLU(nn.Module):
    """Leaky ReLU times sqrt(2), no bias."""

    def __init__(self, negative_slope: float = 0.2):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope) * math.sqrt(2)


class NormStyleCode(nn.Module):
    """Pixel norm over the style vector: x / sqrt(mean(x^2) + 1e-8)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x * x, dim=1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    """Linear layer with equalised learning rate: weights stored unit-variance, scaled at run time.

    ``activation`` is None or ``"fused_lrelu"`` (the bias then goes into the activation).
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True, bias_init_val: float = 0.0,
                 lr_mul: float = 1.0, activation: str | None = None):
        super().__init__()
        if activation not in (None, "fused_lrelu"):
            raise ValueError(f"EqualLinear activation must be None or 'fused_lrelu', not {activation!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.lr_mul = lr_mul
        self.activation = activation
        self.scale = lr_mul / math.sqrt(in_channels)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels) / lr_mul)
        if bias:
            self.bias = nn.Parameter(torch.full((out_channels,), float(bias_init_val)))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias * self.lr_mul
        if self.activation == "fused_lrelu":
            return OPS.fused_leaky_relu(F.linear(x, self.weight * self.scale), bias)
        return F.linear(x, self.weight * self.scale, bias)


class EqualConv2d(nn.Module):
    """Conv2d with equalised learning rate (weight scaled by 1/sqrt(fan_in) at run time)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = True, bias_init_val: float = 0.0):
        super().__init__()
        self.stride = stride
        self.padding = padding
        self.scale = 1 / math.sqrt(in_channels * kernel_size ** 2)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size))
        if bias:
            self.bias = nn.Parameter(torch.full((out_channels,), float(bias_init_val)))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight * self.scale, self.bias, stride=self.stride, padding=self.padding)


class UpFirDnUpsample(nn.Module):
    """2x upsampling with the blur kernel (used on the RGB skip path)."""

    def __init__(self, resample_kernel, factor: int = 2):
        super().__init__()
        # A non-persistent buffer: ``.to(device)``, ``.half()`` and ``map_location`` move
        # it with the weights, a trace reads it as ``self.kernel`` (no device baked in),
        # and it stays out of the state_dict, as in the released checkpoints.
        self.register_buffer("kernel", make_resample_kernel(resample_kernel) * factor ** 2, persistent=False)
        self.factor = factor
        p = self.kernel.shape[0] - factor
        self.pad = ((p + 1) // 2 + factor - 1, p // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return OPS.upfirdn2d(x, self.kernel, up=self.factor, down=1, pad=self.pad)


class UpFirDnSmooth(nn.Module):
    """Blur that goes with a strided (transposed) convolution, so resampling does not alias."""

    def __init__(self, resample_kernel, upsample_factor: int = 1, downsample_factor: int = 1, kernel_size: int = 1):
        super().__init__()
        kernel = make_resample_kernel(resample_kernel)
        k = kernel.shape[0]
        if upsample_factor > 1:
            kernel = kernel * upsample_factor ** 2
            p = (k - upsample_factor) - (kernel_size - 1)
            self.pad = ((p + 1) // 2 + upsample_factor - 1, p // 2 + 1)
        elif downsample_factor > 1:
            p = (k - downsample_factor) + (kernel_size - 1)
            self.pad = ((p + 1) // 2, p // 2)
        else:
            raise NotImplementedError("UpFirDnSmooth needs an up- or a downsampling factor above 1")
        self.register_buffer("kernel", kernel, persistent=False)  # see UpFirDnUpsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return OPS.upfirdn2d(x, self.kernel, up=1, down=1, pad=self.pad)


class ModulatedConv2d(nn.Module):
    """StyleGAN2 modulated convolution: the style scales the weight per input channel.

    ``sample_mode`` is None, ``"upsample"`` (transposed conv, stride 2, then blur)
    or ``"downsample"`` (blur, then conv with stride 2).  No bias.  Each sample in
    the batch gets its own weights.  ``OPS.fused_modconv`` picks how: one grouped
    convolution (upstream, the default) or a shared weight with the modulation
    moved onto the activations (see ``_forward_shared``).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_style_feat: int,
                 demodulate: bool = True, sample_mode: str | None = None, resample_kernel=(1, 3, 3, 1),
                 eps: float = 1e-8):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.demodulate = demodulate
        self.sample_mode = sample_mode
        self.eps = eps
        if sample_mode == "upsample":
            self.smooth = UpFirDnSmooth(resample_kernel, upsample_factor=2, kernel_size=kernel_size)
        elif sample_mode == "downsample":
            self.smooth = UpFirDnSmooth(resample_kernel, downsample_factor=2, kernel_size=kernel_size)
        elif sample_mode is not None:
            raise ValueError(f"sample_mode must be 'upsample', 'downsample' or None, not {sample_mode!r}")
        self.scale = 1 / math.sqrt(in_channels * kernel_size ** 2)
        # style vector -> one multiplier per input channel (starts at 1)
        self.modulation = EqualLinear(num_style_feat, in_channels, bias=True, bias_init_val=1, lr_mul=1)
        self.weight = nn.Parameter(torch.randn(1, out_channels, in_channels, kernel_size, kernel_size))
        self.padding = kernel_size // 2

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        if OPS.fused_modconv:
            return self._forward_grouped(x, style)
        return self._forward_shared(x, style)

    def _forward_grouped(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        """Upstream's way: per-sample weights, all samples in one grouped convolution.

        ``groups=b`` is a Python int, so a trace records the batch size it saw.
        """
        b, c, h, w = x.shape
        k = self.kernel_size
        # modulate: (1, out, in, k, k) * (b, 1, in, 1, 1) -> (b, out, in, k, k)
        weight = self.scale * self.weight * self.modulation(style).view(b, 1, c, 1, 1)
        if self.demodulate:
            # renormalise each output filter to unit L2 norm
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + self.eps)
            weight = weight * demod.view(b, self.out_channels, 1, 1, 1)

        if self.sample_mode == "upsample":
            # conv_transpose2d wants (in, out, k, k) per group
            weight = weight.transpose(1, 2).reshape(b * c, self.out_channels, k, k)
            out = F.conv_transpose2d(x.reshape(1, b * c, h, w), weight, padding=0, stride=2, groups=b)
            out = out.reshape(b, self.out_channels, out.shape[2], out.shape[3])
            return self.smooth(out)

        weight = weight.reshape(b * self.out_channels, c, k, k)
        if self.sample_mode == "downsample":
            x = self.smooth(x)
            out = F.conv2d(x.reshape(1, b * c, x.shape[2], x.shape[3]), weight, padding=0, stride=2, groups=b)
        else:
            out = F.conv2d(x.reshape(1, b * c, h, w), weight, padding=self.padding, groups=b)
        return out.reshape(b, self.out_channels, out.shape[2], out.shape[3])

    def _forward_shared(self, x: torch.Tensor, style: torch.Tensor):
        """The same math with one shared weight: scale the input,
        convolve, rescale the output.

        Modulation multiplies input channel ``i`` of every filter by
        ``s[i]``, which is the same as multiplying the input by ``s``
        first; demodulation multiplies output channel ``o`` by a number,
        which can wait until after the convolution (and the blur, which
        works per channel). No shape becomes a Python number, so a trace
        works for any batch size. Equal to the grouped form up to
        floating-point rounding.
        """
        b, c = x.shape[0], x.shape[1]
        s = self.scale * self.modulation(style)  # (b, in)
        weight = self.weight[0]  # (out, in, k, k)
        x = x * s.view(b, c, 1, 1)
        demod = None
        if self.demodulate:
            # |w * s|^2 summed over (in, k, k), for every sample and
            # output channel: (b, out).
            energy = s.pow(2) @ weight.pow(2).sum([2, 3]).t()
            demod = torch.rsqrt(energy + self.eps)
            demod = demod.view(b, self.out_channels, 1, 1)

        if self.sample_mode == "upsample":
            out = F.conv_transpose2d(
                x, weight.transpose(0, 1), padding=0, stride=2
            )
            if demod is not None:
                out = out * demod
            return self.smooth(out)
        if self.sample_mode == "downsample":
            out = F.conv2d(self.smooth(x), weight, padding=0, stride=2)
        else:
            out = F.conv2d(x, weight, padding=self.padding)
        return out * demod if demod is not None else out


class StyleConv(nn.Module):
    """Modulated conv, then per-pixel noise times a learned strength, then bias + activation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_style_feat: int,
                 demodulate: bool = True, sample_mode: str | None = None, resample_kernel=(1, 3, 3, 1)):
        super().__init__()
        self.modulated_conv = ModulatedConv2d(in_channels, out_channels, kernel_size, num_style_feat,
                                              demodulate=demodulate, sample_mode=sample_mode,
                                              resample_kernel=resample_kernel)
        self.weight = nn.Parameter(torch.zeros(1))  # noise strength
        self.activate = FusedLeakyReLU(out_channels)

    def forward(self, x: torch.Tensor, style: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        out = self.modulated_conv(x, style)
        if noise is None:
            # fresh noise every call: this is what makes official inference stochastic
            b, _, h, w = out.shape
            noise = out.new_empty(b, 1, h, w).normal_()
        out = out + self.weight * noise
        return self.activate(out)


class ToRGB(nn.Module):
    """1x1 modulated conv to RGB (no demodulation), plus the upsampled RGB of the previous level."""

    def __init__(self, in_channels: int, num_style_feat: int, upsample: bool = True, resample_kernel=(1, 3, 3, 1)):
        super().__init__()
        self.upsample = UpFirDnUpsample(resample_kernel, factor=2) if upsample else None
        self.modulated_conv = ModulatedConv2d(in_channels, 3, kernel_size=1, num_style_feat=num_style_feat,
                                              demodulate=False, sample_mode=None)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor, skip: torch.Tensor | None = None) -> torch.Tensor:
        out = self.modulated_conv(x, style) + self.bias
        if skip is not None:
            if self.upsample is not None:
                skip = self.upsample(skip)
            out = out + skip
        return out


class ConstantInput(nn.Module):
    """The learned 4x4 starting tensor of the generator, repeated over the batch."""

    def __init__(self, num_channel: int, size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, num_channel, size, size))

    def forward(self, batch: int) -> torch.Tensor:
        return self.weight.repeat(batch, 1, 1, 1)


class ConvLayer(nn.Sequential):
    """[blur] + EqualConv2d + [activation], as an nn.Sequential (this fixes the key indices).

    Without downsampling the keys are ``0.weight`` (conv) and ``1.bias`` (activation);
    with it, ``0`` is the blur (no parameters), ``1`` the conv and ``2`` the activation.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, downsample: bool = False,
                 resample_kernel=(1, 3, 3, 1), bias: bool = True, activate: bool = True):
        layers: list[nn.Module] = []
        if downsample:
            layers.append(UpFirDnSmooth(resample_kernel, downsample_factor=2, kernel_size=kernel_size))
            stride, padding = 2, 0
        else:
            stride, padding = 1, kernel_size // 2
        # With an activation, the bias lives in FusedLeakyReLU instead of the conv.
        layers.append(EqualConv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                  bias=bias and not activate))
        if activate:
            layers.append(FusedLeakyReLU(out_channels) if bias else ScaledLeakyReLU(0.2))
        super().__init__(*layers)


class ResBlock(nn.Module):
    """Residual block halving the resolution (StyleGAN2 discriminator style); the U-Net encoder."""

    def __init__(self, in_channels: int, out_channels: int, resample_kernel=(1, 3, 3, 1)):
        super().__init__()
        self.conv1 = ConvLayer(in_channels, in_channels, 3, bias=True, activate=True)
        self.conv2 = ConvLayer(in_channels, out_channels, 3, downsample=True, resample_kernel=resample_kernel,
                               bias=True, activate=True)
        self.skip = ConvLayer(in_channels, out_channels, 1, downsample=True, resample_kernel=resample_kernel,
                              bias=False, activate=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.conv2(self.conv1(x)) + self.skip(x)) / math.sqrt(2)


class ConvUpLayer(nn.Module):
    """Bilinear 2x upsampling followed by an equalised conv and an optional activation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = True, bias_init_val: float = 0.0, activate: bool = True):
        super().__init__()
        self.stride = stride
        self.padding = padding
        self.scale = 1 / math.sqrt(in_channels * kernel_size ** 2)
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size))
        if bias and not activate:
            self.bias = nn.Parameter(torch.full((out_channels,), float(bias_init_val)))
        else:
            self.register_parameter("bias", None)
        if activate:
            self.activation = FusedLeakyReLU(out_channels) if bias else ScaledLeakyReLU(0.2)
        else:
            self.activation = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        out = F.conv2d(out, self.weight * self.scale, self.bias, stride=self.stride, padding=self.padding)
        if self.activation is not None:
            out = self.activation(out)
        return out


class ResUpBlock(nn.Module):
    """Residual block doubling the resolution; the U-Net decoder."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = ConvLayer(in_channels, in_channels, 3, bias=True, activate=True)
        self.conv2 = ConvUpLayer(in_channels, out_channels, 3, stride=1, padding=1, bias=True, activate=True)
        self.skip = ConvUpLayer(in_channels, out_channels, 1, bias=False, activate=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.conv2(self.conv1(x)) + self.skip(x)) / math.sqrt(2)


# ---------------------------------------------------------------------------
# The generator with SFT, and GFPGANv1 itself
# ---------------------------------------------------------------------------

class StyleGAN2GeneratorSFT(nn.Module):
    """StyleGAN2 generator (BasicSR layout) whose features are modulated by SFT conditions.

    ``conditions`` is the flat list [scale_8, shift_8, scale_16, shift_16, ...]
    from the U-Net; at each resolution, after the upsampling conv, the features
    become ``features * scale + shift`` (on the second half of the channels only
    when ``sft_half``).
    """

    def __init__(self, out_size: int, num_style_feat: int = 512, num_mlp: int = 8, channel_multiplier: int = 2,
                 resample_kernel=(1, 3, 3, 1), lr_mlp: float = 0.01, narrow: float = 1, sft_half: bool = False):
        super().__init__()
        self.num_style_feat = num_style_feat
        self.sft_half = sft_half
        # Mapping network z -> w (unused when GFPGAN feeds latents directly).
        mlp: list[nn.Module] = [NormStyleCode()]
        for _ in range(num_mlp):
            mlp.append(EqualLinear(num_style_feat, num_style_feat, bias=True, bias_init_val=0, lr_mul=lr_mlp,
                                   activation="fused_lrelu"))
        self.style_mlp = nn.Sequential(*mlp)

        channels = _channels(narrow, channel_multiplier)
        self.channels = channels
        self.constant_input = ConstantInput(channels["4"], size=4)
        self.style_conv1 = StyleConv(channels["4"], channels["4"], 3, num_style_feat, demodulate=True,
                                     sample_mode=None, resample_kernel=resample_kernel)
        self.to_rgb1 = ToRGB(channels["4"], num_style_feat, upsample=False, resample_kernel=resample_kernel)

        self.log_size = int(math.log(out_size, 2))
        self.num_layers = (self.log_size - 2) * 2 + 1  # style convs, i.e. noise inputs
        self.num_latent = self.log_size * 2 - 2  # style vectors consumed

        # Submodule order (style_convs, to_rgbs, noises) fixes the state_dict order.
        self.style_convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()

        # Fixed noise maps, used when randomize_noise=False: 4, 8, 8, 16, 16, ...
        self.noises = nn.Module()
        for layer_idx in range(self.num_layers):
            resolution = 2 ** ((layer_idx + 5) // 2)
            self.noises.register_buffer(f"noise{layer_idx}", torch.randn(1, 1, resolution, resolution))

        # Per resolution 8..out_size: upsampling conv, plain conv, to-RGB.
        in_channels = channels["4"]
        for i in range(3, self.log_size + 1):
            out_channels = channels[f"{2 ** i}"]
            self.style_convs.append(StyleConv(in_channels, out_channels, 3, num_style_feat, demodulate=True,
                                              sample_mode="upsample", resample_kernel=resample_kernel))
            self.style_convs.append(StyleConv(out_channels, out_channels, 3, num_style_feat, demodulate=True,
                                              sample_mode=None, resample_kernel=resample_kernel))
            self.to_rgbs.append(ToRGB(out_channels, num_style_feat, upsample=True, resample_kernel=resample_kernel))
            in_channels = out_channels

    def forward(self, styles, conditions, input_is_latent: bool = False, noise=None, randomize_noise: bool = True,
                truncation: float = 1, truncation_latent=None, inject_index=None, return_latents: bool = False):
        """Render images from a list of style codes and the SFT ``conditions``.

        ``styles``: list of one or two tensors, (N, num_style_feat) or (N, num_latent,
        num_style_feat); with two, style mixing at ``inject_index`` (random if None).
        ``noise``: list of per-layer noise maps; if None, fresh noise when
        ``randomize_noise`` else the registered ``noises.noise{i}`` buffers.
        Returns (image, latent or None).
        """
        if not input_is_latent:
            styles = [self.style_mlp(s) for s in styles]
        if noise is None:
            if randomize_noise:
                noise = [None] * self.num_layers
            else:
                noise = [getattr(self.noises, f"noise{i}") for i in range(self.num_layers)]
        if truncation < 1:
            styles = [truncation_latent + truncation * (s - truncation_latent) for s in styles]

        # One style vector per layer: (N, num_latent, num_style_feat).
        if len(styles) == 1:
            inject_index = self.num_latent
            latent = styles[0] if styles[0].dim() >= 3 else styles[0].unsqueeze(1).repeat(1, inject_index, 1)
        elif len(styles) == 2:
            if inject_index is None:
                inject_index = random.randint(1, self.num_latent - 1)
            first = styles[0].unsqueeze(1).repeat(1, inject_index, 1)
            second = styles[1].unsqueeze(1).repeat(1, self.num_latent - inject_index, 1)
            latent = torch.cat([first, second], 1)
        else:
            raise ValueError(f"expected one or two style tensors, got {len(styles)}")

        out = self.constant_input(latent.shape[0])
        out = self.style_conv1(out, latent[:, 0], noise=noise[0])
        skip = self.to_rgb1(out, latent[:, 1])

        i = 1  # index of the next style vector
        for conv1, conv2, noise1, noise2, to_rgb in zip(self.style_convs[::2], self.style_convs[1::2],
                                                        noise[1::2], noise[2::2], self.to_rgbs):
            out = conv1(out, latent[:, i], noise=noise1)  # upsample x2
            # SFT: conditions[i - 1] is this level's scale, conditions[i] its shift.
            if i < len(conditions):
                if self.sft_half:
                    out_same, out_sft = torch.split(out, int(out.size(1) // 2), dim=1)
                    out_sft = out_sft * conditions[i - 1] + conditions[i]
                    out = torch.cat([out_same, out_sft], dim=1)
                else:
                    out = out * conditions[i - 1] + conditions[i]
            out = conv2(out, latent[:, i + 1], noise=noise2)
            skip = to_rgb(out, latent[:, i + 2], skip)
            i += 2

        return skip, (latent if return_latents else None)


class GFPGANv1(nn.Module):
    """GFPGAN v1: U-Net encoder/decoder feeding a StyleGAN2 decoder through SFT.

    The defaults are the released v1 configuration (see ``RELEASED_V1_CONFIG``)
    except ``out_size``, which defaults to the book's 256; the released
    checkpoint needs ``out_size=512``.  ``fix_decoder`` only turns off
    ``requires_grad`` on the StyleGAN2 decoder.
    """

    def __init__(self, out_size: int = 256, num_style_feat: int = 512, channel_multiplier: int = 1,
                 resample_kernel=(1, 3, 3, 1), fix_decoder: bool = True, num_mlp: int = 8, lr_mlp: float = 0.01,
                 input_is_latent: bool = True, different_w: bool = True, narrow: float = 1, sft_half: bool = True):
        super().__init__()
        self.input_is_latent = input_is_latent
        self.different_w = different_w
        self.num_style_feat = num_style_feat
        self.out_size = out_size
        self.narrow = narrow  # to build a twin that takes this one's weights

        # The U-Net is half as wide as the decoder.
        channels = _channels(narrow * 0.5, channel_multiplier)
        self.log_size = int(math.log(out_size, 2))
        first_out_size = 2 ** self.log_size

        self.conv_body_first = ConvLayer(3, channels[f"{first_out_size}"], 1, bias=True, activate=True)

        # Encoder: out_size -> 4, one ResBlock per halving.
        in_channels = channels[f"{first_out_size}"]
        self.conv_body_down = nn.ModuleList()
        for i in range(self.log_size, 2, -1):
            out_channels = channels[f"{2 ** (i - 1)}"]
            self.conv_body_down.append(ResBlock(in_channels, out_channels, resample_kernel))
            in_channels = out_channels

        self.final_conv = ConvLayer(in_channels, channels["4"], 3, bias=True, activate=True)

        # Decoder: 4 -> out_size, one ResUpBlock per doubling.
        in_channels = channels["4"]
        self.conv_body_up = nn.ModuleList()
        for i in range(3, self.log_size + 1):
            out_channels = channels[f"{2 ** i}"]
            self.conv_body_up.append(ResUpBlock(in_channels, out_channels))
            in_channels = out_channels

        # Intermediate RGB outputs (used by training losses; returned as out_rgbs).
        self.toRGB = nn.ModuleList()
        for i in range(3, self.log_size + 1):
            self.toRGB.append(EqualConv2d(channels[f"{2 ** i}"], 3, 1, stride=1, padding=0, bias=True,
                                          bias_init_val=0))

        # Bottleneck -> style code: one w per decoder layer when different_w.
        linear_out = (self.log_size * 2 - 2) * num_style_feat if different_w else num_style_feat
        self.final_linear = EqualLinear(channels["4"] * 4 * 4, linear_out, bias=True, bias_init_val=0, lr_mul=1,
                                        activation=None)

        self.stylegan_decoder = StyleGAN2GeneratorSFT(out_size=out_size, num_style_feat=num_style_feat,
                                                      num_mlp=num_mlp, channel_multiplier=channel_multiplier,
                                                      resample_kernel=resample_kernel, lr_mlp=lr_mlp,
                                                      narrow=narrow, sft_half=sft_half)
        if fix_decoder:
            for param in self.stylegan_decoder.parameters():
                param.requires_grad = False

        # SFT condition heads: per decoder level, a scale map and a shift map.
        self.condition_scale = nn.ModuleList()
        self.condition_shift = nn.ModuleList()
        for i in range(3, self.log_size + 1):
            out_channels = channels[f"{2 ** i}"]
            sft_out_channels = out_channels if sft_half else out_channels * 2
            self.condition_scale.append(nn.Sequential(
                EqualConv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=True, bias_init_val=0),
                ScaledLeakyReLU(0.2),
                EqualConv2d(out_channels, sft_out_channels, 3, stride=1, padding=1, bias=True, bias_init_val=1)))
            self.condition_shift.append(nn.Sequential(
                EqualConv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=True, bias_init_val=0),
                ScaledLeakyReLU(0.2),
                EqualConv2d(out_channels, sft_out_channels, 3, stride=1, padding=1, bias=True, bias_init_val=0)))

    def forward(self, x, return_latents=False, save_feat_path=None, load_feat_path=None, return_rgb=True,
                randomize_noise=True):
        """Restore faces ``x`` (N, 3, out_size, out_size), RGB in [-1, 1].

        Returns ``(image, out_rgbs)``: the restored image and the list of
        intermediate RGB images (empty unless ``return_rgb``).

        Kept as upstream had it, on purpose (later chapters explain the cost):
        ``randomize_noise=True`` draws fresh noise each call; ``save_feat_path``
        ``torch.save``s the SFT conditions; ``load_feat_path`` ``torch.load``s
        them and moves them to the GPU with ``.cuda()``.
        """
        conditions = []
        unet_skips = []
        out_rgbs = []

        # Encoder, remembering each level for the skip connections.
        feat = self.conv_body_first(x)
        for i in range(self.log_size - 2):
            feat = self.conv_body_down[i](feat)
            unet_skips.insert(0, feat)
        feat = self.final_conv(feat)

        # Style code from the 4x4 bottleneck.
        style_code = self.final_linear(feat.view(feat.size(0), -1))
        if self.different_w:
            style_code = style_code.view(style_code.size(0), -1, self.num_style_feat)

        # Decoder: add the skip, upsample, emit the SFT conditions of this level.
        for i in range(self.log_size - 2):
            feat = feat + unet_skips[i]
            feat = self.conv_body_up[i](feat)
            scale = self.condition_scale[i](feat)
            conditions.append(scale.clone())
            shift = self.condition_shift[i](feat)
            conditions.append(shift.clone())
            if return_rgb:
                out_rgbs.append(self.toRGB[i](feat))

        if save_feat_path is not None:
            torch.save(conditions, save_feat_path)
        if load_feat_path is not None:
            conditions = torch.load(load_feat_path)
            conditions = [v.cuda() for v in conditions]

        image, _ = self.stylegan_decoder([style_code], conditions, return_latents=return_latents,
                                         input_is_latent=self.input_is_latent, randomize_noise=randomize_noise)
        return image, out_rgbs


class GFPGANForDeploy(nn.Module):
    """GFPGANv1 with its inference options fixed: ``forward(x) -> image``.

    Equal to ``net(x, return_rgb=False, randomize_noise=False)[0]``.  The network
    itself is not edited, so the same object still trains and still answers the
    original ``forward`` options; only this wrapper is traced or exported.
    """

    def __init__(self, net: GFPGANv1):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image, _ = self.net(x, return_rgb=False, randomize_noise=False)
        return image


# ---------------------------------------------------------------------------
# Building and loading
# ---------------------------------------------------------------------------

class CheckpointMismatchError(RuntimeError):
    """A checkpoint whose keys or shapes do not match the architecture."""


def _describe_mismatch(model: nn.Module, state_dict: dict) -> str | None:
    """A readable report of missing/unexpected keys and shape mismatches, or None if all match."""
    missing, unexpected, wrong_shape = state_dict_mismatch(model.state_dict(), state_dict)
    if not (missing or unexpected or wrong_shape):
        return None
    lines = []
    for title, items in (("missing keys", missing), ("unexpected keys", unexpected),
                         ("shape mismatches", wrong_shape)):
        if items:
            lines.append(f"{len(items)} {title}:")
            lines.extend(f"    {item}" for item in items)
    # A frequent cause: the wrong out_size.  The number of noise maps gives the checkpoint's.
    size = checkpoint_out_size(state_dict)
    if size:
        lines.append(f"(the checkpoint looks like out_size={size}; "
                     f"the model was built with out_size={model.out_size})")
    return "\n".join(lines)


def build_gfpgan(out_size: int = 256, seed: int = 0, noise_strength: float = 0.1, **kwargs) -> GFPGANv1:
    """A GFPGANv1 with a seeded random initialisation, in eval mode.

    This is NOT the trained network: its output is not a restored face.  It has
    the right architecture, parameter shapes and cost, which is all the
    deployment chapters need when the real weights are not available.
    The same ``seed`` always gives the same weights (the global RNG is left alone).

    The upstream initialisation sets every noise strength (``StyleConv.weight``) to
    zero, which would make the random model ignore noise altogether; trained
    weights do not.  They are set to ``noise_strength`` here so that
    ``randomize_noise=True`` visibly changes the output, as it does with the
    real checkpoint.  Pass ``noise_strength=0`` for the upstream initialisation.
    ``kwargs`` go to ``GFPGANv1``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GFPGANv1(out_size=out_size, **kwargs)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, StyleConv):
                module.weight.fill_(noise_strength)
    return model.eval()


def checkpoint_out_size(state_dict: dict) -> int | None:
    """The out_size a GFPGANv1 state_dict was built for, from its number of noise maps (None if none)."""
    n_noise = sum(1 for k in state_dict if k.startswith("stylegan_decoder.noises.noise"))
    return 2 ** ((n_noise - 1) // 2 + 2) if n_noise else None


def load_gfpgan(path: str | os.PathLike, out_size: int | None = None, **kwargs) -> GFPGANv1:
    """Load a GFPGANv1 checkpoint (such as the released ``GFPGANv1.pth``) strictly, in eval mode.

    Reads with ``weights_only=True``; takes ``params_ema`` if present, else
    ``params`` (a bare state_dict is refused).  ``out_size=None`` takes the size
    the checkpoint was built for (512 for the released file).  Any missing or
    unexpected key, or wrong shape, raises ``CheckpointMismatchError`` naming
    them.  ``kwargs`` override the architecture (defaults: the released v1
    configuration).
    """
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict):
        raise CheckpointMismatchError(f"{path}: expected a dict with 'params_ema' or 'params', "
                                      f"got {type(checkpoint).__name__}")
    if "params_ema" in checkpoint:
        state_dict = checkpoint["params_ema"]
    elif "params" in checkpoint:
        state_dict = checkpoint["params"]
    else:
        keys = ", ".join(repr(k) for k in list(checkpoint)[:20]) or "(none)"
        raise CheckpointMismatchError(f"{path}: no 'params_ema' or 'params' entry; top-level keys: {keys}")

    if out_size is None:
        out_size = checkpoint_out_size(state_dict) or RELEASED_V1_CONFIG["out_size"]
    model = GFPGANv1(out_size=out_size, **kwargs)
    problem = _describe_mismatch(model, state_dict)
    if problem is not None:
        raise CheckpointMismatchError(f"{path} does not fit GFPGANv1(out_size={out_size}):\n{problem}")
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


def weights_path() -> Path | None:
    """Where the real checkpoint is: ``$GFPGAN_WEIGHTS``, else ``assets/GFPGANv1.pth``, else None."""
    named = os.environ.get(WEIGHTS_ENV, "").strip()
    if named:
        return Path(named)
    return ASSET_WEIGHTS if ASSET_WEIGHTS.is_file() else None


def gfpgan_from_environment(out_size: int = 256) -> tuple[GFPGANv1, str]:
    """The real GFPGANv1 when its checkpoint is available, else the seeded random stand-in.

    The checkpoint is ``$GFPGAN_WEIGHTS`` or ``assets/GFPGANv1.pth``; the real
    network gets the size the checkpoint was built for (512 for the released
    file) and ``out_size`` is ignored.  The random stand-in is built at
    ``out_size`` and ``STAND_IN_NARROW`` (half the released width).  Returns
    ``(model, description)``; the description says in plain words which one it is, for notebooks to print.  A named file that does
    not exist is not an error (the description says so); one that does not fit
    raises ``CheckpointMismatchError``.
    """
    path = weights_path()
    if path is not None and path.is_file():
        model = load_gfpgan(path)
        return model, f"GFPGANv1 trained weights from {path} (out_size={model.out_size})"
    if path is not None:
        reason = f"${WEIGHTS_ENV} is set to {path}, but there is no such file"
    else:
        reason = f"${WEIGHTS_ENV} is not set and there is no {ASSET_WEIGHTS.name} in assets/"
    description = (f"randomly initialised GFPGANv1 (seed 0, out_size={out_size}, "
                   f"narrow={STAND_IN_NARROW}) because {reason}: the real network's layers at "
                   "half their width, not trained, so its output is not a restored face")
    return build_gfpgan(out_size=out_size, seed=0, narrow=STAND_IN_NARROW), description
