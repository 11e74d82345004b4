"""Which device the chapters run on: ``TRITONBOOK_DEVICE=auto|cpu|cuda``.

``auto`` (the default) is the GPU where torch sees one and the CPU elsewhere, so the same
cells run on a reader's GPU box and on a laptop. ``cpu`` keeps everything on the CPU
where a GPU exists too (the book's committed outputs are the CPU's); ``cuda`` asks for the
GPU and fails, saying why, where torch sees none.

A cell places its networks with ``torch_device()`` and writes the instance groups of its
configs with ``instance_group(count)``: KIND_GPU on the GPU, KIND_CPU on the CPU, as the
container's Triton needs them (a config that names no kind gets a GPU instance wherever
the server has a GPU). The configs of ``model_repository/`` name KIND_CPU; on a GPU run
``server.Triton.load`` serves them through ``place(config)``, which moves their instances
to the GPU, except an AOTInductor package's (it runs only on the device it was compiled
for). A config a cell writes out in full is loaded as written. ``describe()`` is the line a chapter prints: the device, and on a
GPU the TF32 settings that change float32 results.

The few cells that cannot run on one of the devices are listed in ``SKIPS``, each with
the reason the cell prints instead of running; ``skipped(label)`` gives that reason on
this device, or ``None``. A test holds the list to the notebooks.
"""

from __future__ import annotations

import os

__all__ = ["VARIABLE", "CHOICES", "SKIPS", "selected", "torch_device", "instance_kind",
           "instance_group", "place", "describe", "skipped"]

VARIABLE = "TRITONBOOK_DEVICE"
CHOICES = ("auto", "cpu", "cuda")

# label -> {device: the reason a cell prints instead of running there}.
SKIPS: dict[str, dict[str, str]] = {
    # Chapter 3: trace parity on the GPU, with TF32 off and on.
    "gpu-trace-parity": {
        "cpu": "This run is on the CPU: the GPU comparison (TF32 off and on) is skipped.",
    },
}
# Packages compiled ahead of time for one device (an AOTInductor .pt2 holds CPU or CUDA
# kernels, not both): their configs keep the kind they name.
COMPILED_FOR_ONE_DEVICE = ("torch_aoti",)


def _choice() -> str:
    choice = os.environ.get(VARIABLE, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{VARIABLE} must be one of {', '.join(CHOICES)}, not {choice!r}")
    return choice


def selected() -> str:
    """``"cuda"`` or ``"cpu"``: the device this run's cells use."""
    import torch

    choice = _choice()
    if choice == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if choice == "cuda" and not available:
        build = torch.version.cuda
        why = (f"this torch ({torch.__version__}) is built without CUDA" if build is None
               else f"torch {torch.__version__} (CUDA {build}) finds no GPU")
        raise RuntimeError(f"{VARIABLE}=cuda, but {why}")
    return "cuda" if available else "cpu"


def torch_device():
    """The ``torch.device`` a cell puts its networks and inputs on."""
    import torch

    return torch.device("cuda", 0) if selected() == "cuda" else torch.device("cpu")


def instance_kind() -> str:
    """``KIND_GPU`` or ``KIND_CPU``, for the configs a cell writes or loads."""
    return "KIND_GPU" if selected() == "cuda" else "KIND_CPU"


def instance_group(count: int = 1) -> list[dict]:
    """A config's ``instance_group``: ``count`` instances on this run's device."""
    if count < 1:
        raise ValueError("an instance group needs at least one instance")
    group = {"count": count, "kind": instance_kind()}
    if group["kind"] == "KIND_GPU":
        group["gpus"] = [0]
    return [group]


def place(config: dict) -> dict:
    """``config`` (JSON form) with its KIND_CPU instance groups on this run's device:
    unchanged on the CPU, KIND_GPU on GPU 0 with the same counts on a GPU run. A model
    compiled for one device (``COMPILED_FOR_ONE_DEVICE``) keeps its groups."""
    if instance_kind() == "KIND_CPU" or config.get("platform") in COMPILED_FOR_ONE_DEVICE:
        return config
    groups = [dict(group, **instance_group(int(group.get("count", 1)))[0])
              if group.get("kind") == "KIND_CPU" else group
              for group in config.get("instance_group", [])]
    return dict(config, instance_group=groups) if groups else config


def describe() -> str:
    """One line: the device, and on a GPU its name and the TF32 settings."""
    import torch

    if selected() == "cpu":
        return f"device: CPU ({VARIABLE}={_choice()})"
    matmul = torch.backends.cuda.matmul.allow_tf32
    cudnn = torch.backends.cudnn.allow_tf32
    return (f"device: {torch.cuda.get_device_name(0)} ({VARIABLE}={_choice()}); "
            f"TF32 for matmul {'on' if matmul else 'off'}, for cuDNN convolutions "
            f"{'on' if cudnn else 'off'}")


def skipped(label: str) -> str | None:
    """Why the cell ``label`` does not run on this device, or ``None`` when it does."""
    if label not in SKIPS:
        raise KeyError(f"{label!r} is not in tritonbook.device.SKIPS")
    return SKIPS[label].get(selected())
