"""Chapter 7's instruments against a real embedded server of their own: metrics, health,
a killed python stub, sockets, shared memory."""

import os
import platform
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tritonbook import loadgen, production, repository, server
from tritonbook.client import infer

X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def triton():
    with server.EmbeddedTriton(repository.REPOSITORY, load_models=["affine_python"]) as embedded:
        yield embedded


def ask(triton):
    return infer(triton, "affine_python", {"INPUT__0": X}, ["OUTPUT__0"], "grpc")["OUTPUT__0"]


def test_metrics_count_what_was_sent_and_agree_with_the_statistics_api(triton):
    before = production.scrape(triton.metrics_url)
    api_before = loadgen.server_totals(triton, "affine_python")
    with production.MetricsRecorder(triton.metrics_url, period=0.05) as recorder:
        for _ in range(5):
            np.testing.assert_array_equal(ask(triton), 2 * X + 1)
    # Counted after the answers left: wait for all five before reading either view.
    api_after = production.wait_counted(
        triton, {"affine_python": api_before["requests"] + 5})["affine_python"]
    after = production.scrape(triton.metrics_url)
    table = production.metrics_table(before, after, ["affine_python"])
    # Five requests of two rows, no batcher: 5 requests, 10 inferences, 5 executions.
    assert table.loc["affine_python", ["requests", "inferences", "executions"]].tolist() == [5, 10, 5]
    assert api_after["requests"] - api_before["requests"] == 5
    per_request_api = (api_after["infer"] - api_before["infer"]) / 5 / 1e6
    assert table.loc["affine_python", "infer ms"] == pytest.approx(per_request_api, abs=0.01)
    series = recorder.series("affine_python")
    assert len(recorder.frames) >= 2 and series["requests"].sum() == 5


def test_waiting_for_a_count_the_server_never_reaches_times_out(triton):
    counted = loadgen.server_totals(triton, "affine_python")["requests"]
    with pytest.raises(TimeoutError, match="affine_python"):
        production.wait_counted(triton, {"affine_python": counted + 1}, timeout=0.3)


def test_the_parser_reads_labels_and_skips_comments(triton):
    samples = production.scrape(triton.metrics_url)
    assert ("nv_inference_count", (("model", "affine_python"), ("version", "1"))) in samples
    assert not any(name.startswith("#") for name, _ in samples)


def test_health_codes_as_a_load_balancer_sees_them(triton):
    assert production.health_codes(triton.http_url, "affine_python") == {
        "live": 200, "ready": 200, "affine_python ready": 200}
    assert production.health_codes(triton.http_url, "no_such_model")["no_such_model ready"] == 400
    (port,) = server._free_ports(1)
    assert production.health_codes(f"127.0.0.1:{port}") == {"live": 0, "ready": 0}


def test_index_status_reports_what_a_restricted_api_answers(triton):
    assert production.index_status(triton.http_url) == (200, "")
    guard = "--http-restricted-api=model-repository:admin-key=secret"
    with server.EmbeddedTriton(repository.REPOSITORY, load_models=[],
                               extra_args=[guard]) as guarded:
        status, error = production.index_status(guarded.http_url)
        assert status == 403 and "admin-key" in error
        assert production.index_status(guarded.http_url, {"admin-key": "secret"}) == (200, "")


def test_health_watcher_counts_the_polls_each_endpoint_passed(triton):
    with production.HealthWatcher(triton.http_url, "affine_python", period=0.01) as ready:
        time.sleep(0.2)
    with production.HealthWatcher(triton.http_url, "no_such_model", period=0.01) as missing:
        time.sleep(0.2)
    counts = ready.ready_before(time.perf_counter())
    assert counts["polls"] >= 3 and counts["affine_python ready"] == counts["ready"] == counts["polls"]
    assert ready.ready_before(ready.polls[0][0]) == {"polls": 0, "affine_python ready": 0, "ready": 0}
    counts = missing.ready_before(time.perf_counter())
    assert counts["polls"] >= 3 and counts["no_such_model ready"] == 0


def test_metrics_recorder_plots_one_panel_per_model(triton):
    with production.MetricsRecorder(triton.metrics_url, period=0.1) as recorder:
        for _ in range(5):
            ask(triton)
            time.sleep(0.1)
    fig = recorder.plot(["affine_python"], "test")
    [ax] = fig.axes
    assert ax.get_title() == "affine_python" and len(ax.lines) == 2
    assert sum(len(line.get_xdata()) for line in ax.lines) > 0


def test_a_killed_stub_leaves_the_model_ready_and_failing_until_unload_and_load(triton):
    [stub] = production.stub_processes(triton.pid, "affine_python")
    region = production.stub_region(stub)
    assert production.shm_segments(region) == [region]
    stub.send_signal(signal.SIGKILL)
    production.wait_dead(stub)
    assert production.stub_processes(triton.pid, "affine_python") == []
    assert triton.model_ready("affine_python")
    with pytest.raises(InferenceServerException, match="is not healthy"):
        ask(triton)
    triton.load("affine_python")  # the same config: the server keeps the dead instance
    with pytest.raises(InferenceServerException, match="is not healthy"):
        ask(triton)
    triton.unload("affine_python")
    triton.load("affine_python")
    np.testing.assert_array_equal(ask(triton), 2 * X + 1)
    assert len(production.stub_processes(triton.pid, "affine_python")) == 1
    # The dead stub's region stays in /dev/shm: the server does not remove it.
    assert production.shm_segments(region) == [region]
    (Path("/dev/shm") / region).unlink()


def test_the_embedded_server_listens_on_loopback_only(triton):
    addresses = production.listening_addresses(triton.pid)
    assert {port for _, port in addresses} == {
        int(url.rsplit(":", 1)[1]) for url in (triton.http_url, triton.grpc_url, triton.metrics_url)}
    assert all(address.endswith("127.0.0.1") for address, _ in addresses)


def test_shared_memory_round_trip_leaves_nothing_behind(triton):
    client = httpclient.InferenceServerClient(triton.http_url)
    region = shm.create_shared_memory_region("test_in", "/tritonbook_test_in", X.nbytes)
    try:
        assert production.shm_segments("tritonbook_test") == ["tritonbook_test_in"]
        client.register_system_shared_memory("test_in", "/tritonbook_test_in", X.nbytes)
        shm.set_shared_memory_region(region, [X])
        sent = httpclient.InferInput("INPUT__0", list(X.shape), "FP32")
        sent.set_shared_memory("test_in", X.nbytes)
        answer = client.infer("affine_python", [sent]).as_numpy("OUTPUT__0")
        np.testing.assert_array_equal(answer, 2 * X + 1)
        # A region the server cannot open is refused with a clear error.
        with pytest.raises(InferenceServerException, match="shared memory"):
            client.register_system_shared_memory("missing", "/tritonbook_missing", 64)
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)
        client.close()
    assert production.shm_segments("tritonbook_test") == []


def test_wait_dead_gives_up_on_a_live_process():
    import psutil

    with pytest.raises(TimeoutError, match="still running"):
        production.wait_dead(psutil.Process(), timeout=0.2)


def test_machine_name_names_the_cpu_cores_and_gpus():
    import os

    import torch

    name = production.machine_name()
    assert f"{os.cpu_count()} cores" in name
    assert ("no GPU" in name) == (torch.cuda.device_count() == 0)


def test_small_cnn_is_the_same_network_on_every_call_and_keeps_the_image_size():
    import torch

    first, second = production.small_cnn(), production.small_cnn()
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
    with torch.no_grad():
        out = first(torch.rand(2, 3, 37, 50))
    assert out.shape == (2, 3, 37, 50)


def test_small_cnn_onnx_computes_what_the_network_does_at_any_batch_and_size():
    import onnxruntime
    import torch

    net = production.small_cnn()
    session = onnxruntime.InferenceSession(production.small_cnn_onnx(net))
    assert [i.name for i in session.get_inputs()] == ["input__0"]
    assert [o.name for o in session.get_outputs()] == ["output__0"]
    image = torch.rand(3, 3, 29, 41)
    got = session.run(None, {"input__0": image.numpy()})[0]
    with torch.no_grad():
        assert got == pytest.approx(net(image).numpy(), abs=1e-5)


def test_a_server_with_a_small_dev_shm_of_its_own_refuses_a_large_request_and_stays_up():
    with pytest.raises(ValueError, match="at least 1 MiB"):
        server.EmbeddedTriton(dev_shm_bytes=4096)
    config = dict(repository.read_config("face_detect"),
                  parameters={"FACE_SIZE": {"string_value": "512"}})
    code = (repository.REPOSITORY / "face_detect" / "1" / "model.py").read_bytes()
    with server.EmbeddedTriton(dev_shm_bytes=8 * 2**20) as own:
        own.load("face_detect", config, files={"file:1/model.py": code})
        before = production.stub_shm(own)
        assert before["size MiB"] == 8 and before["regions MiB"] == [1.0]
        small = {"PIXELS": np.zeros((100, 100, 3), np.uint8)}
        large = {"PIXELS": np.zeros((2000, 2000, 3), np.uint8)}  # 12 MB each way
        with pytest.raises(InferenceServerException, match="No space left on device"):
            infer(own, "face_detect", large, ["BOXES"], "grpc")
        assert own.is_live() and own.process.poll() is None
        assert infer(own, "face_detect", small, ["BOXES"], "grpc")["BOXES"].shape == (0, 4)
        # The private /dev/shm is not the machine's: nothing of this server is there.
        assert production.shm_segments(own.shm_prefix) == []


def test_stub_python_is_the_python_that_runs_the_embedded_server(triton):
    # The embedded server runs the wheel's stub for this Python (tritonbook.server).
    assert production.stub_python(triton) == {
        "version": platform.python_version(), "base_prefix": sys.base_prefix}
    assert not triton.model_ready("python_probe")  # unloaded again


TWICE = "def twice(x):\n    return 2 * x\n"
TWICE_MODEL = b"""
import triton_python_backend_utils as pb_utils
from twice import twice


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", twice(pb_utils.get_input_tensor_by_name(r, "X").as_numpy()))]) for r in requests]
"""


def test_a_packed_environment_activates_wherever_it_is_unpacked(tmp_path):
    archive = repository.pack_python_environment(tmp_path / "env.tar.gz", {"twice": TWICE})
    unpacked = tmp_path / "somewhere" / "else"
    with tarfile.open(archive) as packed:
        packed.extractall(unpacked, filter="tar")
    # As the 24.10 backend does: bash sources bin/activate, then the first python3 on PATH.
    done = subprocess.run(
        ["bash", "-c", (f"source {unpacked}/bin/activate && python3 -c "
                        "'import sys, numpy, twice; print(sys.prefix); print(twice.twice(21))'")],
        capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(unpacked), "42"]


def test_a_packed_environment_serves_the_way_25_08_starts_it(tmp_path):
    archive = repository.pack_python_environment(tmp_path / "env.tar.gz", {"twice": TWICE})
    unpacked = tmp_path / "somewhere" / "else"
    with tarfile.open(archive) as packed:
        packed.extractall(unpacked, filter="tar")
    # As python_backend does from 25.08 (ParseActivationScript, src/pb_utils.cc at r26.07):
    # the script is not run; VIRTUAL_ENV is the folder, its bin/ first on PATH.
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONHOME"}
    environment.update(VIRTUAL_ENV=str(unpacked),
                       PATH=f"{unpacked}/bin:{os.environ['PATH']}")
    done = subprocess.run(
        ["python3", "-c", "import sys, numpy, twice; print(sys.prefix); print(twice.twice(21))"],
        capture_output=True, text=True, check=True, env=environment)
    assert done.stdout.split() == [str(unpacked), "42"]


def test_a_model_serves_the_module_of_its_packed_environment(tmp_path):
    archive = repository.pack_python_environment(tmp_path / "env.tar.gz", {"twice": TWICE})
    config = {"backend": "python", "max_batch_size": 0,
              "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1]}],
              "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}],
              "parameters": {"EXECUTION_ENV_PATH": {
                  "string_value": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}}}
    files = {"file:1/model.py": TWICE_MODEL, "file:env.tar.gz": archive.read_bytes()}
    before = set(Path("/tmp").glob("python_env_*"))
    # A server of its own: the module's server ends on Triton's exit timeout (a killed
    # stub), and a server that exits that way leaves the unpacked environment behind.
    with server.EmbeddedTriton() as own:
        own.load("packed_twice", config, files=files)
        x = np.array([1.5, -2.0], dtype=np.float32)
        np.testing.assert_array_equal(infer(own, "packed_twice", {"X": x}, ["Y"])["Y"], 2 * x)
    # A server that stops cleanly removes what it unpacked (other servers, of tests
    # running beside this one, may have made folders of their own meanwhile).
    left = [folder for folder in set(Path("/tmp").glob("python_env_*")) - before
            if list(folder.glob("*/lib/python*/site-packages/twice.py"))]
    assert not left, left


def test_standin_share_sets_served_compute_beside_the_same_file_in_process(scratch_server):
    import io

    import torch

    buffer = io.BytesIO()
    torch.jit.save(torch.jit.trace(production.small_cnn(), torch.rand(1, 3, 16, 16)), buffer)
    dims = {"data_type": "TYPE_FP32", "dims": [3, -1, -1]}
    config = {"name": "share_cnn", "platform": "pytorch_libtorch", "max_batch_size": 4,
              "input": [{"name": "input__0", **dims}],
              "output": [{"name": "output__0", **dims}],
              "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}
    scratch_server.load("share_cnn", config, files={"file:1/model.pt": buffer.getvalue()})
    try:
        tile = {"input__0": np.random.default_rng(0).random((1, 3, 16, 16), np.float32)}
        share = production.standin_share(scratch_server, "share_cnn", tile,
                                         buffer.getvalue(), batches=(1, 4), repeats=20)
    finally:
        scratch_server.unload("share_cnn")
    assert list(share.index) == [1, 4]
    served, alone = share["served, ms per execution"], share["network alone, mean ms"]
    assert (served > 0).all() and (alone > 0).all()
    assert share["added by serving, ms"].tolist() == pytest.approx((served - alone).tolist())
    assert share["added, % of execution"].tolist() == pytest.approx(
        (100 * (served - alone) / served).tolist())
    # The table's numbers hold on any machine; their sizes are the chapter's to read.
    for batch, spread in share["q1-q3 alone, ms"].items():
        q1, q3 = map(float, spread.split("-"))
        assert 0 < q1 <= q3, batch


def test_the_instance_device_is_the_kind_of_every_group_and_both_kinds_are_refused():
    def config(*kinds):
        return {"name": "m", "instance_group": [{"kind": k, "count": 1} for k in kinds]}

    assert production.instance_device(config("KIND_CPU")) == "cpu"
    assert production.instance_device(config("KIND_GPU", "KIND_GPU")) == "cuda"
    # A model served on both kinds has no one device to compare with.
    with pytest.raises(ValueError, match=r"\['KIND_CPU', 'KIND_GPU'\]"):
        production.instance_device(config("KIND_GPU", "KIND_CPU"))
