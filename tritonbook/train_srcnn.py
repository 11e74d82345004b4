"""Train the book's SRCNN weights on its own images, on the CPU, in a few minutes.

    python -m tritonbook.train_srcnn --factor 3 --out assets/srcnn_x3.pth
    python -m tritonbook.train_srcnn --factor 2 3 4 --out assets/srcnn_multiscale.pth
    python -m tritonbook.train_srcnn --evaluate assets/srcnn_x3.pth

Data: random patches of ``assets/chelsea.png`` and ``assets/coffee_crop_400.png``
(see ``assets/README.md``).  The astronaut portrait (``astronaut_face_256.png``)
is held out: nothing of it is trained on, and the PSNR table is measured on it.

Degradation, for a factor ``s``: the high-resolution image, cropped so that it is a
whole number of low-resolution pixels, is shrunk to ``floor(size / s)`` with
antialiased bicubic interpolation (``F.interpolate(..., antialias=True)``, like
PIL's or MATLAB's ``imresize``; OpenCV's ``INTER_CUBIC`` would alias when
shrinking) and rounded to whole grey levels, as if saved as a uint8 file.  The
network upscales it back with ``srcnn.bicubic_upscale`` (the interpolation of every
SRCNN variant, no antialiasing) and its convolutions learn to map that bicubic image
to the original (plain SRCNN: no residual connection).

The weights are written in mmediting's layout (``{'state_dict': {'generator.conv1.weight':
...}}``), so ``srcnn.load_srcnn_checkpoint`` reads them exactly like the released file.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from tritonbook import srcnn

__all__ = ["TRAIN_IMAGES", "HELD_OUT_IMAGE", "EVAL_FACTORS", "load_bgr", "degrade", "evaluate", "identity_init",
           "format_table", "train"]

ASSETS = srcnn.ASSETS
TRAIN_IMAGES = ("chelsea.png", "coffee_crop_400.png")
HELD_OUT_IMAGE = "astronaut_face_256.png"
EVAL_FACTORS = (2.0, 3.0, 4.0, 2.5)


def load_bgr(name: str | Path) -> np.ndarray:
    """A colour image from ``assets/`` (or a path), as cv2.imread gives it: BGR uint8 (H, W, 3)."""
    import cv2

    path = Path(name) if Path(name).is_absolute() else ASSETS / name
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise FileNotFoundError(f"cannot read an image at {path}")
    return image


def degrade(hr: torch.Tensor, factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(low-resolution input, matching high-resolution target) for NCHW ``hr`` in [0, 255].

    The low-resolution image is ``floor(H / factor) x floor(W / factor)``, shrunk with
    antialiased bicubic and rounded to whole grey levels.  The target is ``hr`` cropped
    (top-left) to ``floor(low * factor)``, the size ``bicubic_upscale`` gives back.
    """
    height, width = hr.shape[-2:]
    low_h, low_w = int(height // factor), int(width // factor)
    if low_h < 1 or low_w < 1:
        raise ValueError(f"a {height}x{width} image is too small for factor {factor}")
    target_h, target_w = math.floor(low_h * factor), math.floor(low_w * factor)
    target = hr[..., :target_h, :target_w]
    low = F.interpolate(target, size=(low_h, low_w), mode="bicubic", align_corners=False, antialias=True)
    return low.round().clamp(0, 255), target


def evaluate(model: srcnn.SRCNN, image: np.ndarray | None = None,
             factors: Sequence[float] = EVAL_FACTORS) -> list[dict[str, float]]:
    """PSNR (dB, uint8 outputs, all BGR channels) of plain bicubic and of ``model`` per factor.

    ``image`` defaults to the held-out astronaut portrait.  Each row has ``factor``,
    ``bicubic``, ``srcnn`` and ``gain`` (srcnn - bicubic).
    """
    hr = srcnn.image_to_tensor(load_bgr(HELD_OUT_IMAGE) if image is None else image)
    rows = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for factor in factors:
            low, target = degrade(hr, factor)
            upscaled = srcnn.bicubic_upscale(low, factor)
            target_image = srcnn.tensor_to_image(target)
            bicubic = srcnn.psnr(srcnn.tensor_to_image(upscaled), target_image)
            restored = srcnn.psnr(srcnn.tensor_to_image(model.refine(upscaled)), target_image)
            rows.append({"factor": float(factor), "bicubic": bicubic, "srcnn": restored, "gain": restored - bicubic})
    model.train(was_training)
    return rows


def format_table(rows: Sequence[dict[str, float]]) -> str:
    """The rows of ``evaluate`` as a small Markdown table."""
    lines = ["| factor | bicubic (dB) | SRCNN (dB) | gain (dB) |", "|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['factor']:g} | {row['bicubic']:.2f} | {row['srcnn']:.2f} | {row['gain']:+.2f} |")
    return "\n".join(lines)


def _training_pairs(factors: Sequence[float]) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """(bicubic-upscaled input, target, factor) for every training image and factor, whole images."""
    pairs = []
    for name in TRAIN_IMAGES:
        hr = srcnn.image_to_tensor(load_bgr(name))
        for factor in factors:
            low, target = degrade(hr, factor)
            pairs.append((srcnn.bicubic_upscale(low, factor)[0], target[0], float(factor)))
    return pairs


def _batch(pairs, factors, rng: np.random.Generator, batch: int, patch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random aligned patches, a factor drawn uniformly per patch, with random flips/transposes."""
    inputs, targets = [], []
    by_factor: dict[float, list[int]] = {}
    for index, (_, _, factor) in enumerate(pairs):
        by_factor.setdefault(factor, []).append(index)
    for _ in range(batch):
        factor = float(factors[rng.integers(len(factors))])
        candidates = by_factor[factor]
        upscaled, target, _ = pairs[candidates[rng.integers(len(candidates))]]
        top = int(rng.integers(0, target.shape[-2] - patch + 1))
        left = int(rng.integers(0, target.shape[-1] - patch + 1))
        x = upscaled[:, top:top + patch, left:left + patch]
        y = target[:, top:top + patch, left:left + patch]
        if rng.random() < 0.5:
            x, y = x.flip(-1), y.flip(-1)
        if rng.random() < 0.5:
            x, y = x.flip(-2), y.flip(-2)
        if rng.random() < 0.5:
            x, y = x.transpose(-1, -2), y.transpose(-1, -2)
        inputs.append(x)
        targets.append(y)
    return torch.stack(inputs).contiguous(), torch.stack(targets).contiguous()


def identity_init(model: srcnn.SRCNN, scale: float = 1e-2) -> srcnn.SRCNN:
    """Start the trunk as (almost) the identity, so training starts from plain bicubic.

    Three of conv1's 64 channels copy the B, G and R inputs (a centred 1 in their 9x9
    kernels; pixels are >= 0, so the ReLU passes them), three of conv2's channels copy
    those, and conv3 adds them back up; every other weight keeps PyTorch's random
    initialisation, conv3's scaled by ``scale`` so the random channels start quiet.
    The architecture is unchanged (no residual connection): this is only a start.
    """
    with torch.no_grad():
        for conv, centre in ((model.conv1, 4), (model.conv2, 0)):
            conv.weight[:3].zero_()
            conv.bias[:3].zero_()
            for c in range(3):
                conv.weight[c, c, centre, centre] = 1.0
        model.conv3.weight.mul_(scale)
        model.conv3.weight[:, :3].zero_()
        model.conv3.bias.zero_()
        for c in range(3):
            model.conv3.weight[c, c, 2, 2] = 1.0
    return model


def train(factors: Sequence[float], steps: int = 4000, batch: int = 16, patch: int = 48, lr: float = 3e-4,
          seed: int = 0, init: str = "identity", progress: bool = True) -> srcnn.SRCNN:
    """Train an SRCNN trunk (Adam, cosine learning rate, MSE on [0, 1]) and return it in eval mode."""
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = srcnn.SRCNN()
    if init == "identity":
        identity_init(model)
    elif init != "default":
        raise ValueError(f"init must be 'identity' or 'default', not {init!r}")
    pairs = _training_pairs(factors)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=lr * 0.02)
    model.train()
    bar = tqdm(range(steps), desc=f"SRCNN x{'/'.join(f'{f:g}' for f in factors)}", disable=not progress,
               mininterval=2.0)
    running = None
    for _ in bar:
        x, y = _batch(pairs, factors, rng, batch, patch)
        loss = F.mse_loss(model.refine(x) / 255.0, y / 255.0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        bar.set_postfix(psnr=f"{-10 * math.log10(max(running, 1e-12)):.2f} dB", refresh=False)
    return model.eval()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonbook.train_srcnn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--factor", "--factors", dest="factors", type=float, nargs="+", default=[3.0],
                        help="upscale factor(s) to train on; with several, each patch draws one (default: 3)")
    parser.add_argument("--out", type=Path, help="where to write the weights (mmediting layout)")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--patch", type=int, default=48)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init", choices=("identity", "default"), default="identity",
                        help="start from the identity (default) or from PyTorch's random initialisation")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    parser.add_argument("--evaluate", type=Path, metavar="WEIGHTS",
                        help="only print the PSNR table for existing weights")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    # Tiny (denormal) floats are very slow on x86 CPUs; training makes some.
    torch.set_flush_denormal(True)

    if args.evaluate is not None:
        model = srcnn.load_srcnn_checkpoint(args.evaluate, srcnn.SRCNN())
        print(f"{args.evaluate}, held-out {HELD_OUT_IMAGE}:")
        print(format_table(evaluate(model)))
        return 0
    if args.out is None:
        parser.error("--out is required unless --evaluate is given")

    start = time.perf_counter()
    model = train(args.factors, steps=args.steps, batch=args.batch, patch=args.patch, lr=args.lr, seed=args.seed,
                  init=args.init)
    seconds = time.perf_counter() - start
    rows = evaluate(model)
    meta = {
        "trained_by": "python -m tritonbook.train_srcnn " + " ".join(sys.argv[1:] if argv is None else argv),
        "factors": [float(f) for f in args.factors],
        "steps": args.steps, "batch": args.batch, "patch": args.patch, "lr": args.lr, "seed": args.seed, "init": args.init,
        "train_images": list(TRAIN_IMAGES), "held_out_image": HELD_OUT_IMAGE,
        "psnr_held_out": [{k: round(v, 3) for k, v in row.items()} for row in rows],
        "torch": str(torch.__version__),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    srcnn.save_srcnn_checkpoint(model, args.out, meta=meta)
    print(f"trained in {seconds:.0f} s on {torch.get_num_threads()} threads; wrote {args.out} "
          f"({args.out.stat().st_size / 1024:.0f} kB)")
    print(f"held-out {HELD_OUT_IMAGE}, PSNR over all channels of uint8 images:")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
