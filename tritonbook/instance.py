"""Where a python model's instance runs, from the ``args`` Triton gives ``initialize``.

Triton passes every python-backend instance its kind (``model_instance_kind``: "CPU",
"GPU" or "MODEL") and device (``model_instance_device_id``). A config with no ``kind``
gets one KIND_GPU instance per GPU on a machine that has GPUs, and KIND_CPU elsewhere.
A python model that runs a network must follow this, not assume the CPU: in the
container it would otherwise run on the CPU next to a ``gfpgan`` that Triton put on
the GPU. The libtorch stand-in and ``face_restore_python`` both read it here.
"""

from __future__ import annotations


def instance_device(args: dict):
    """``cuda:<id>`` for a KIND_GPU instance, else the CPU (a ``torch.device``)."""
    import torch

    if args.get("model_instance_kind", "CPU") != "GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        name = args.get("model_instance_name", args.get("model_name", "?"))
        raise RuntimeError(f"instance '{name}' is KIND_GPU but torch sees no GPU")
    return torch.device("cuda", int(args.get("model_instance_device_id", 0) or 0))
