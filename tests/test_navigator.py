"""tritonbook.navigator: quiet runs of Model Navigator, and what its workspace says."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from tritonbook import navigator


def test_quiet_sends_python_and_child_process_output_to_the_log(
    tmp_path, capfd
):
    log = tmp_path / "run.log"
    with navigator.quiet(log):
        print("from print")
        os.write(2, b"from file descriptor 2\n")
        subprocess.run(
            [sys.executable, "-c", "print('from a child')"], check=True
        )
    print("after the block")
    written = log.read_text()
    assert "from print" in written
    assert "from file descriptor 2" in written
    assert "from a child" in written
    seen = capfd.readouterr()
    assert seen.out == "after the block\n"
    assert "from" not in seen.err


def test_first_errors_names_the_cause_not_the_navigators_wrapper(
    tmp_path,
):
    (tmp_path / "navigator.log").write_text(
        "x | INFO | ===== Command 'ExportTorch2ONNX' started =====\n"
        "Traceback (most recent call last):\n"
        "TypeError: upsample_bicubic2d(): argument 'scale_factors' must be tuple\n"
        "torch.onnx._internal.exporter._errors.TorchExportError: Failed to export\n"
        "model_navigator.exceptions.ModelNavigatorUserInputError: Command to reproduce"
        " error: /bin/bash onnx/reproduce_export.sh\n"
        "x | INFO | ===== Command 'ExportTorch2TorchScript' started =====\n"
        "RuntimeError: \n"
        "Arguments for call are not valid.\n"
        "model_navigator.exceptions.ModelNavigatorUserInputError: Command to reproduce"
        " error: /bin/bash torchscript-script/reproduce_export.sh\n"
    )
    assert navigator.first_errors(tmp_path) == {
        ("onnx", "ExportTorch2ONNX"): (
            "TypeError: upsample_bicubic2d(): argument 'scale_factors' must be tuple"
        ),
        ("torchscript-script", "ExportTorch2TorchScript"): (
            "RuntimeError: Arguments for call are not valid."
        ),
    }


def test_config_differences_lists_only_the_fields_that_differ():
    ours = {
        "platform": "onnxruntime_onnx",
        "max_batch_size": 0,
        "input": [
            {
                "name": "input",
                "data_type": "TYPE_FP32",
                "dims": [1, 3, -1, -1],
            }
        ],
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
    }
    theirs = dict(
        ours,
        platform=None,
        backend="onnxruntime",
        max_batch_size=2,
        dynamic_batching={},
    )
    fields = {
        row["field"]: row
        for row in navigator.config_differences(ours, theirs)
    }
    assert set(fields) == {
        "platform",
        "backend",
        "max_batch_size",
        "dynamic_batching",
    }
    assert fields["max_batch_size"]["navigator"] == 2
    assert fields["dynamic_batching"]["navigator"] == "{}"


# The run, in a fresh interpreter as a reader's script or kernel is: Model Navigator
# refuses to import where something already fixed multiprocessing's start method to
# fork (another test in the same pytest worker can have done so).
RUN = """
import json, os, sys, time
from pathlib import Path
import torch
from booktools.leftovers import mapped_inodes, unmapped_after
from tritonbook import navigator

def semaphores():
    return {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")}

def left_behind(names):
    # Ours: still mapped by this process (a lock the navigator's run left open). Mapped
    # by no process, and still there moments later: a lock whose process has ended and
    # nobody unlinked (a test running beside this one has its ended processes' locks
    # unlinked by its resource tracker within moments).
    ours = mapped_inodes(os.getpid())
    left = set(unmapped_after(names))
    for name in names:
        try:
            if os.stat("/dev/shm/" + name).st_ino in ours:
                left.add(name)
        except FileNotFoundError:
            pass
    return sorted(left)

before = semaphores()
workspace = sys.argv[1]
navigator.CACHE = Path(sys.argv[2])
with navigator.quiet(workspace + ".log"):
    import model_navigator as nav
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
samples = [torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(2)]
options = dict(
    target_device=nav.DeviceKind.CPU,
    target_formats=(nav.Format.ONNX,),
    runners=("TorchCPU", "OnnxCPU"),
    optimization_profile=nav.OptimizationProfile(
        max_batch_size=1, throughput_cutoff_threshold=None, stability_percentage=100
    ),
)
navigator.optimize(model, samples, workspace, **options)
# The same run again, into a second workspace: a copy of the first, and a package.
again = navigator.optimize(model, samples, workspace + "-again", **options)
assert type(again).__name__ == "Package", again
key = navigator.run_key(model, samples, options)
other_model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
keys_differ = [
    navigator.run_key(model, samples[:1], options) != key,
    navigator.run_key(other_model, samples, options) != key,
    navigator.run_key(model, samples, dict(options, runners=("OnnxCPU",))) != key,
]
import multiprocessing
from tqdm import tqdm

# After the runs, what a notebook goes on to do: a progress bar (tqdm's class-wide lock)
# and a lock of its own, both made outside the navigator's runs.
for _ in tqdm(range(2), disable=False):
    pass
lock = multiprocessing.Lock()
# Measured before the interpreter exits, while nothing has cleaned up for it yet.
print(json.dumps({
    "left": left_behind(semaphores() - before),
    "keys_differ": keys_differ,
    "method": multiprocessing.get_start_method(allow_none=True),
}))
"""


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="reads what the CPU path reports"
)
def test_summary_of_a_real_run_on_the_cpu(tmp_path):
    # Found, not imported: importing it here is what must not happen.
    if importlib.util.find_spec("model_navigator") is None:
        pytest.skip("requirements-navigator.txt is not installed")
    workspace = tmp_path / "workspace"
    cache = tmp_path / "cache"
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(workspace), str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Under the navigator's spawn start method each lock is a named semaphore, which a
    # killed process would leave behind; quiet() closes the run's own and keeps spawn
    # to the runs, so the locks made after them have no name to leave.
    after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after["left"] == []
    assert after["method"] != "spawn"  # the platform's default again
    rows = {row["format"]: row for row in navigator.summary(workspace)}
    assert rows["onnx"]["export"] == "OK"
    assert rows["onnx"]["correctness"] == "OK"
    assert rows["onnx"]["profiling"] == "OK"
    # A PyTorch without CUDA: the torch runner's profiling calls torch.cuda.synchronize().
    assert rows["torch"]["profiling"] == "FAIL"
    assert rows["torch"]["first error"].startswith(
        "AssertionError: Torch not compiled with CUDA"
    )
    # Profiling does not count as a failure; a failed export or check does.
    table = navigator.summary(workspace)
    assert navigator.outcome(table, "torch") == "pass"
    assert navigator.outcome(table, "onnx") == "pass"
    # The second run was the first's workspace, from the cache: one entry, one log.
    assert len(list(cache.iterdir())) == 1
    assert navigator.summary(tmp_path / "workspace-again") == navigator.summary(workspace)
    first_log = (tmp_path / "workspace.log").read_text()
    assert (tmp_path / "workspace-again.log").read_text().startswith(first_log)
    # Another sample, weight or option is another run.
    assert after["keys_differ"] == [True, True, True]


def test_outcome_reads_export_and_check_only():
    rows = [
        {"format": "onnx", "export": "OK", "correctness": "OK", "profiling": "FAIL"},
        {"format": "torchscript-trace", "export": "OK", "correctness": "FAIL", "profiling": None},
        {"format": "torch-exportedprogram", "export": "FAIL", "correctness": None, "profiling": None},
    ]
    assert navigator.outcome(rows, "onnx") == "pass"
    assert navigator.outcome(rows, "torchscript-trace") == "fail"
    assert navigator.outcome(rows, "torch-exportedprogram") == "fail"
    with pytest.raises(KeyError, match="did not try 'tensorrt'"):
        navigator.outcome(rows, "tensorrt")
