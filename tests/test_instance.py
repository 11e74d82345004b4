"""Python models that run a network put it where Triton put their instance."""

import re
from pathlib import Path

import pytest
import torch

from tritonbook import repository
from tritonbook.instance import instance_device

PACKAGE = Path(repository.__file__).parent
# Every python model of the book, and the stand-in backends (also python models).
PYTHON_MODELS = sorted(repository.REPOSITORY.glob("*/1/model.py")) + sorted(PACKAGE.glob("standins/*/model.py"))
# What loads or runs a network in a python model.
RUNS_A_NETWORK = re.compile(r"torch\.jit\.load|InferenceSession\(|aoti_load_package\(")


def test_cpu_and_model_kinds_run_on_the_cpu():
    assert instance_device({"model_instance_kind": "CPU", "model_instance_device_id": "0"}) == torch.device("cpu")
    assert instance_device({"model_instance_kind": "MODEL"}) == torch.device("cpu")
    assert instance_device({}) == torch.device("cpu")


def test_a_gpu_instance_gets_its_own_gpu_or_a_clear_error():
    args = {"model_instance_kind": "GPU", "model_instance_device_id": "1", "model_instance_name": "gfpgan_0"}
    if torch.cuda.is_available():
        assert instance_device(args) == torch.device("cuda", 1)
    else:
        with pytest.raises(RuntimeError, match="instance 'gfpgan_0' is KIND_GPU but torch sees no GPU"):
            instance_device(args)


def test_the_models_that_run_a_network_are_found():
    names = {p.parent.parent.name if p.parent.name == "1" else p.parent.name
             for p in PYTHON_MODELS if RUNS_A_NETWORK.search(p.read_text())}
    assert {"face_restore_python", "pytorch", "onnxruntime", "torch_aoti"} <= names, names


@pytest.mark.parametrize("path", PYTHON_MODELS, ids=lambda p: "/".join(p.parts[-3:]))
def test_no_python_model_fixes_its_device(path):
    source = path.read_text()
    fixed = re.findall(r"""map_location\s*=\s*["']c(?:pu|uda)|torch\.device\(\s*["']""", source)
    assert not fixed, f"{path} fixes a device: {fixed}"
    if RUNS_A_NETWORK.search(source):
        assert re.search(r"instance_device\(|instance_kind", source), f"{path} ignores its instance's device"
