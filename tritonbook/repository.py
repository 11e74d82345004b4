"""The book's model repository: where it is, and building the model files it does not commit.

Configs (``config.pbtxt``) and python models are committed. Model files (TorchScript,
ONNX) are generated: each has a builder here, so any chapter, test or reader can call
``ensure_model_files()`` and get a repository that loads, without running the chapters
that produce the files first.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from tritonbook.server import DEFAULT_REPOSITORY

REPOSITORY = DEFAULT_REPOSITORY


def build_affine_torchscript(path: Path) -> None:
    """y = 2x + 1 as a TorchScript file (the environment chapter's libtorch model)."""
    import torch

    class Affine(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * x + 1

    with warnings.catch_warnings():
        # torch.jit is deprecated in PyTorch 2.13; chapter 3 discusses it and the
        # modern path. The libtorch backend still serves TorchScript only.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Affine()), str(path))


def build_affine_onnx(path: Path) -> None:
    """y = 2x + 1 as an ONNX graph with a dynamic batch dimension."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes=[
            helper.make_node("Mul", ["x", "two"], ["twice"]),
            helper.make_node("Add", ["twice", "one"], ["y"]),
        ],
        name="affine",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    # Opset 17 and IR 8 load in every onnxruntime the book meets, old containers too.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def build_gfpgan_torchscript(path: Path) -> None:
    """GFPGANv1 traced for serving: the steps of chapters 2 and 3 in one function.

    The network is the real one when its checkpoint is available
    (``$GFPGAN_WEIGHTS`` or ``assets/GFPGANv1.pth``), else the seeded random
    stand-in; which one is written into the file as ``extra/tritonbook.txt``.
    The trace is of ``GFPGANForDeploy`` (inference options fixed) with the
    batch-agnostic modulated convolution, checked at a second batch size
    before it is saved.
    """
    import torch

    from tritonbook.gfpgan import GFPGANForDeploy, gfpgan_from_environment, use_ops
    from tritonbook.images import load_face, to_tensor

    net, description = gfpgan_from_environment()
    deploy = GFPGANForDeploy(net).eval()
    face = to_tensor(load_face(net.out_size))
    with warnings.catch_warnings(), torch.no_grad(), use_ops(fused_modconv=False):
        warnings.simplefilter("ignore", DeprecationWarning)
        # The channel split in the SFT layers is a constant of the architecture.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(deploy, face, check_trace=False)
        pair = torch.cat([face, face.flip(3)])
        torch.testing.assert_close(traced(pair), deploy(pair), rtol=1e-4, atol=1e-4)
        torch.jit.save(traced, str(path), _extra_files={"tritonbook.txt": description})


def build_srcnn_onnx(path: Path) -> None:
    """SRCNN with a dynamic factor as ONNX: the modern path of chapter 4.

    The multi-scale weights from ``assets/``, the ``tritonbook::resize_bicubic`` custom
    operator translated to an ONNX ``Resize`` whose ``scales`` is the graph input
    ``factor``, and dynamic image height and width. One file, no external data.
    """
    import logging

    import torch

    from tritonbook import srcnn

    # The exporter logs that torchvision's operators are not registered: not used here.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    model = srcnn.load_srcnn_checkpoint(srcnn.WEIGHTS_MULTISCALE, srcnn.SRCNNCustomOp())
    example = torch.zeros(1, 3, 32, 48)
    height, width = torch.export.Dim("height", min=4), torch.export.Dim("width", min=4)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example, srcnn.scales_tensor(3)), str(path), dynamo=True,
                          custom_translation_table=srcnn.TRANSLATION_TABLE, external_data=False,
                          dynamic_shapes=({2: height, 3: width}, None),
                          input_names=["input", "factor"], output_names=["output"], verbose=False)


# model name -> (file inside the model folder, builder)
BUILDERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "affine_torchscript": ("1/model.pt", build_affine_torchscript),
    "affine_onnx": ("1/model.onnx", build_affine_onnx),
    "gfpgan": ("1/model.pt", build_gfpgan_torchscript),
    "srcnn": ("1/model.onnx", build_srcnn_onnx),
}


def register(model: str, relative_path: str, builder: Callable[[Path], None]) -> None:
    """Add a generated model file (chapters register theirs as they come)."""
    BUILDERS[model] = (relative_path, builder)


def model_names(repository: str | os.PathLike = REPOSITORY) -> list[str]:
    """Every model folder (one with a config.pbtxt) in the repository."""
    return sorted(p.parent.name for p in Path(repository).glob("*/config.pbtxt"))


def ensure_model_files(
    models: Iterable[str] | None = None,
    repository: str | os.PathLike = REPOSITORY,
    rebuild: bool = False,
) -> list[Path]:
    """Build every missing generated model file (or the named ones); return what was built."""
    repository = Path(repository)
    built = []
    for model in BUILDERS if models is None else models:
        if model not in BUILDERS:
            continue  # a model with nothing to generate (a python model, an ensemble)
        relative, builder = BUILDERS[model]
        path = repository / model / relative
        if path.exists() and not rebuild:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        builder(partial)
        partial.replace(path)  # never leave a half-written model file behind
        built.append(path)
    return built
