"""TRITONBOOK_DEVICE: the device the chapters run on (issue 53)."""

import json
import re
from pathlib import Path

import pytest
import torch

from tritonbook import device

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LABEL = re.compile(r"""device\.skipped\(\s*["']([\w-]+)["']""")


def test_cpu_is_the_cpu_wherever_a_gpu_is(monkeypatch):
    monkeypatch.setenv(device.VARIABLE, "cpu")
    assert device.selected() == "cpu"
    assert device.torch_device() == torch.device("cpu")
    assert device.instance_group(2) == [{"count": 2, "kind": "KIND_CPU"}]
    assert device.describe() == "device: CPU (TRITONBOOK_DEVICE=cpu)"


def test_auto_follows_what_torch_sees(monkeypatch):
    monkeypatch.delenv(device.VARIABLE, raising=False)
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert device.selected() == want
    kind = device.instance_group()[0]["kind"]
    assert kind == ("KIND_GPU" if want == "cuda" else "KIND_CPU")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_cuda_without_a_gpu_says_why(monkeypatch):
    monkeypatch.setenv(device.VARIABLE, "cuda")
    with pytest.raises(RuntimeError, match=r"TRITONBOOK_DEVICE=cuda, but .*(without CUDA|finds no GPU)"):
        device.selected()


def test_an_unknown_device_is_refused(monkeypatch):
    monkeypatch.setenv(device.VARIABLE, "gpu")
    with pytest.raises(ValueError, match="must be one of auto, cpu, cuda, not 'gpu'"):
        device.selected()
    monkeypatch.setenv(device.VARIABLE, "cpu")
    with pytest.raises(ValueError, match="at least one instance"):
        device.instance_group(0)


def test_a_skip_is_listed_with_its_reason(monkeypatch):
    monkeypatch.setenv(device.VARIABLE, "cpu")
    with pytest.raises(KeyError, match="not in tritonbook.device.SKIPS"):
        device.skipped("no-such-cell")
    monkeypatch.setitem(device.SKIPS, "example", {"cuda": "needs the CPU's oneDNN"})
    assert device.skipped("example") is None


def test_the_skip_list_is_the_notebooks_own():
    """Every label a cell asks about is listed, with a reason per device; every listed
    label is asked about by a cell."""
    used = set()
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                used |= set(LABEL.findall("".join(cell["source"])))
    assert used == set(device.SKIPS), (used ^ set(device.SKIPS))
    for label, reasons in device.SKIPS.items():
        assert reasons and set(reasons) <= {"cpu", "cuda"}, label
        assert all(reason.strip() for reason in reasons.values()), label


def test_a_repository_config_moves_to_the_gpu_on_a_gpu_run(monkeypatch):
    config = {"name": "gfpgan", "platform": "pytorch_libtorch",
              "instance_group": [{"count": 2, "kind": "KIND_CPU"}, {"count": 1, "kind": "KIND_MODEL"}]}
    monkeypatch.setenv(device.VARIABLE, "cpu")
    assert device.place(config) is config  # the CPU changes nothing
    monkeypatch.setattr(device, "selected", lambda: "cuda")
    placed = device.place(config)
    assert placed["instance_group"] == [{"count": 2, "kind": "KIND_GPU", "gpus": [0]},
                                        {"count": 1, "kind": "KIND_MODEL"}]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"  # a copy, not the original
    aoti = dict(config, platform="torch_aoti")  # compiled for the CPU: stays there
    assert device.place(aoti) is aoti
    assert device.place({"name": "ensemble", "platform": "ensemble"}) == {
        "name": "ensemble", "platform": "ensemble"}


def test_a_cpu_run_builds_no_cuda_kernels_on_a_gpu_box(monkeypatch):
    from tritonbook import cpp_ops

    monkeypatch.setattr(torch.version, "cuda", "12.6")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(device.VARIABLE, "cpu")
    assert cpp_ops._cuda_toolkit() == (None, "TRITONBOOK_DEVICE=cpu: this run keeps to the CPU")


def test_a_skipped_cell_prints_its_reason_in_the_committed_cpu_run():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            for label in LABEL.findall(source) if cell["cell_type"] == "code" else ():
                printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
                assert device.SKIPS[label]["cpu"] in printed, (path.name, label)


def test_the_stub_gets_numpy_1_where_the_machine_has_numpy_2(monkeypatch):
    # A lent GPU machine: booktools/gpu_device.sh names numpy 1.26 for the 24.10 stub.
    from tritonbook import server

    monkeypatch.setenv("TRITONBOOK_FALLBACK_NUMPY", "/tmp/tritonbook-gpu/numpy126")
    monkeypatch.setattr(server.importlib.metadata, "version", lambda name: "2.5.2")
    env = server._server_environment(server._wheel_paths())
    assert env["TRITONBOOK_STUB_NUMPY"] == "/tmp/tritonbook-gpu/numpy126"
    monkeypatch.setattr(server.importlib.metadata, "version", lambda name: "1.26.4")
    assert "TRITONBOOK_STUB_NUMPY" not in server._server_environment(server._wheel_paths())
