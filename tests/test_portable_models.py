"""Generated model files run on any device: no device is baked into them.

The container puts ``gfpgan`` on a GPU (no instance kind in its config), while the file is
traced on a CPU. ``map_location`` moves weights, not constants written into the code,
so a file that recorded ``torch.device("cpu")`` fails on its first GPU request. There is
no GPU here; these tests read the code of every generated TorchScript file, and use the
dtype as a stand-in for the device: a constant baked into the code ignores ``.double()``
just as it ignores ``map_location="cuda"``.
"""

import warnings

import onnx
import pytest
import torch
import torch.nn.functional as F

from tritonbook import repository
from tritonbook.gfpgan import GFPGANv1, UpFirDnSmooth, UpFirDnUpsample

# Every model whose generated file is TorchScript, built by the book's own builders
# (links to another model's file are covered by that model).
TORCHSCRIPT_MODELS = sorted({model for model, files in repository.BUILDERS.items()
                             for relative, builder in files
                             if relative.endswith(".pt") and not hasattr(builder, "target")})
ONNX_MODELS = sorted({model for model, files in repository.BUILDERS.items()
                      for relative, _ in files if relative.endswith(".onnx")})


@pytest.fixture(scope="module")
def built():
    """Every generated file in the book's repository, built now when missing. `make test`
    runs the notebooks first, and they build these files from the code as it is (a file
    built from other code or inputs is rebuilt: `repository.inputs_key`), so CI checks
    the files of the current code without building twice."""
    repository.ensure_model_files(TORCHSCRIPT_MODELS + ONNX_MODELS)
    return repository.REPOSITORY


def test_the_torchscript_models_are_found():
    assert {"affine_torchscript", "gfpgan", "face_passthrough"} <= set(TORCHSCRIPT_MODELS)


@pytest.mark.parametrize("model", TORCHSCRIPT_MODELS)
def test_no_torchscript_file_holds_a_device(built, model):
    for relative, _ in repository.BUILDERS[model]:
        found = repository.device_constants(built / model / relative)
        assert found == [], f"{model}/{relative} names a device in its code:\n" + "\n".join(found[:5])


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_files_use_only_standard_operators(built, model):
    # ONNX has no device in its format; a custom-domain operator, however, would run only
    # where its implementation is registered (chapter 4 translates its custom op).
    for relative, _ in repository.BUILDERS[model]:
        graph = onnx.load(str(built / model / relative)).graph
        domains = {node.domain for node in graph.node}
        assert domains <= {"", "ai.onnx"}, f"{model}/{relative} uses operator domains {domains}"


def test_the_gfpgan_file_follows_its_module(built):
    loaded = torch.jit.load(str(built / "gfpgan" / "1" / "model.pt")).double()
    size = repository.gfpgan_out_size(built / "gfpgan" / "1" / "model.pt")
    with torch.no_grad():
        out = loaded(torch.zeros(1, 3, size, size, dtype=torch.float64))
    assert out.dtype == torch.float64


class BakedBlur(torch.nn.Module):
    """The mistake the check must catch: a plain tensor attribute moved with ``.to(x)``."""

    def __init__(self):
        super().__init__()
        self.kernel = torch.ones(1, 1, 3, 3) / 9

    def forward(self, x):
        return F.conv2d(x, self.kernel.to(x), padding=1)


def test_the_check_finds_a_baked_device(tmp_path):
    path = tmp_path / "baked.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(BakedBlur(), torch.zeros(1, 1, 8, 8)), str(path))
    found = repository.device_constants(path)
    assert len(found) == 1 and 'torch.device("cpu")' in found[0], found
    with pytest.raises(RuntimeError, match="scalar type|same dtype|dtype"):
        torch.jit.load(str(path)).double()(torch.zeros(1, 1, 8, 8, dtype=torch.float64))


def test_blur_kernels_move_with_the_network_but_are_not_saved():
    net = GFPGANv1(out_size=32).double()
    kernels = {name: buffer for name, buffer in net.named_buffers() if name.endswith(".kernel")}
    assert kernels and all(k.dtype == torch.float64 for k in kernels.values())
    assert not set(kernels) & set(net.state_dict())
    assert isinstance(UpFirDnUpsample((1, 3, 3, 1)).kernel, torch.Tensor)
    assert "kernel" in dict(UpFirDnSmooth((1, 3, 3, 1), downsample_factor=2).named_buffers())


def test_aoti_packages_are_pinned_to_the_device_they_were_compiled_for():
    # An AOTInductor package is compiled code for one device: unlike TorchScript it cannot
    # be made portable. The book compiles it on the CPU, so its config must keep it there;
    # the stand-in refuses a mismatch at load (compile it on the GPU box for KIND_GPU).
    aoti_models = sorted({model for model, files in repository.BUILDERS.items()
                          for relative, _ in files if relative.endswith(".pt2")})
    assert aoti_models == ["gfpgan_aoti"]
    for model in aoti_models:
        groups = repository.read_config(model)["instance_group"]
        assert groups and all(group["kind"] == "KIND_CPU" for group in groups), groups
