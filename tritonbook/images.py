"""Images in and out of the networks: the book's face photograph, tensors, and figures.

Face networks here take RGB tensors in [-1, 1], NCHW. OpenCV reads BGR, so the
conversion lives in one place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["ASSETS", "FACE_CREDIT", "load_face", "to_tensor", "to_image", "show_images"]

ASSETS = Path(__file__).resolve().parent.parent / "assets"

FACE_CREDIT = ("Eileen Collins, NASA (public domain), via scikit-image's data; "
               "cropped and resized for this book (assets/README.md)")


def load_face(size: int = 256) -> np.ndarray:
    """The astronaut portrait from ``assets/``, as an RGB uint8 array of shape (size, size, 3)."""
    import cv2

    path = ASSETS / f"astronaut_face_{size}.png"
    if not path.is_file():
        sizes = sorted(int(p.stem.rsplit("_", 1)[1]) for p in ASSETS.glob("astronaut_face_*.png"))
        raise FileNotFoundError(f"no {path.name} in {ASSETS}; sizes available: {sizes}")
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    return np.ascontiguousarray(bgr[:, :, ::-1])


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """RGB uint8 (H, W, 3) -> float32 (1, 3, H, W) in [-1, 1]."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected an RGB uint8 image of shape (H, W, 3), got {image.dtype} {image.shape}")
    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float()
    # Contiguous NCHW, as a server would pass it: compiled models (AOTInductor) assume it.
    return (tensor / 127.5 - 1.0).unsqueeze(0).contiguous()


def to_image(tensor: torch.Tensor) -> np.ndarray:
    """(1, 3, H, W) or (3, H, W) in [-1, 1] -> RGB uint8 (H, W, 3); values outside are clipped."""
    t = tensor.detach().float().cpu()
    if t.dim() == 4:
        if t.shape[0] != 1:
            raise ValueError(f"expected one image, got a batch of {t.shape[0]}")
        t = t[0]
    t = ((t.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return t.permute(1, 2, 0).numpy()


def show_images(images: dict[str, np.ndarray], caption: str | None = None, size: float = 3.2):
    """Images side by side with their titles (returns the figure)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(images), figsize=(size * len(images), size + 0.4), squeeze=False)
    for ax, (title, image) in zip(axes[0], images.items()):
        ax.imshow(image)
        ax.set_title(title, fontsize=10)
        ax.axis("off")
    if caption:
        fig.text(0.5, 0.01, caption, ha="center", fontsize=8)
    fig.tight_layout()
    return fig
