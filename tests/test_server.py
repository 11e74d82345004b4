"""The embedded server's lifecycle: start, stop, errors, two at once, dying with its parent."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tritonbook import repository, server
from tritonbook.client import infer, request_counts
from conftest import write_model

PYTHON_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)])
            for r in requests]
"""
PYTHON_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""


def triton_processes(pgid):
    """PIDs still in the server's process group (tritonserver and its stubs)."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid="], capture_output=True, text=True).stdout
    return [int(p) for p, g in (line.split() for line in out.splitlines()) if int(g) == pgid]


def process_states(pgid):
    """What is left of a server's process group, for a failure message."""
    out = subprocess.run(["ps", "-eo", "pgid=,pid=,stat=,args="],
                         capture_output=True, text=True).stdout
    rows = [line for line in out.splitlines() if line.split()[0] == str(pgid)]
    return "\n".join(rows) or "none"


def wait_gone(pgid, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and triton_processes(pgid):
        time.sleep(0.1)
    return triton_processes(pgid)


@pytest.fixture
def plus_one_repository(tmp_path):
    write_model(tmp_path, "plus_one", PYTHON_CONFIG, {"1/model.py": PYTHON_MODEL})
    return tmp_path


def listening_addresses(port):
    """Local addresses with a listening TCP socket on ``port`` (from /proc/net/tcp*)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


def test_start_infer_stop_leaves_nothing_behind(plus_one_repository):
    triton = server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"])
    workdir, pgid = triton.workdir, triton.pid
    try:
        assert triton.is_ready() and triton.model_ready("plus_one")
        # The python model runs in a stub process in the server's group.
        assert len(triton_processes(pgid)) >= 2
        out = infer(triton, "plus_one", {"IN": np.array([[41]], dtype=np.int32)}, ["OUT"])
        assert out["OUT"].tolist() == [[42]]
        # 127.0.0.1 only: /proc writes it 0100007F, or as ::ffff:127.0.0.1 (gRPC).
        loopback = {"0100007F", "0000000000000000FFFF00000100007F"}
        for port in (triton.http_port, triton.grpc_port, triton.metrics_port):
            addresses = listening_addresses(port)
            assert addresses and addresses <= loopback, (port, addresses)
    finally:
        triton.stop()
    assert wait_gone(pgid) == []
    assert not workdir.exists()
    assert not triton.is_live()
    triton.stop()  # a second stop is harmless
    assert "successfully loaded 'plus_one'" in triton.log()


def test_context_manager_stops_the_server(plus_one_repository):
    with server.EmbeddedTriton(plus_one_repository) as triton:
        pgid = triton.pid
        assert triton.is_live()
    assert wait_gone(pgid) == []


def test_stop_all_stops_every_server_and_leaves_nothing_behind(plus_one_repository):
    first = server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"])
    second = server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"])
    groups = [first.pid, second.pid]
    workdirs = [first.workdir, second.workdir]
    server.stop_all(first, second)
    assert [wait_gone(pgid) for pgid in groups] == [[], []]
    assert not any(w.exists() for w in workdirs)
    assert not first.is_live() and not second.is_live()
    server.stop_all(first, second)  # stopped servers: harmless again


def test_broken_repository_gives_a_clear_error_with_the_log(tmp_path):
    write_model(tmp_path, "broken", 'backend: "python"\nmax_batch_size: "eight"\n')
    with pytest.raises(server.TritonServerError) as caught:
        server.EmbeddedTriton(tmp_path, load_models=["broken"], startup_timeout=60)
    message = str(caught.value)
    assert "exited with code" in message or "failed to start" in message
    assert "--- server log (last lines) ---" in message
    assert "broken" in message  # the log names the model that failed


def test_a_failed_start_ends_within_tritons_exit_timeout(plus_one_repository):
    # One model loads and will not finalize quickly; another fails. Triton unloads the
    # first, waits up to its exit timeout (10 s by default), logs why it failed and
    # exits: the error comes then, not at the start-up limit, and nothing is left.
    slow = PYTHON_MODEL + "\n    def finalize(self):\n        import time\n        time.sleep(120)\n"
    write_model(plus_one_repository, "slow_to_stop", PYTHON_CONFIG, {"1/model.py": slow})
    write_model(plus_one_repository, "needs_a_package", PYTHON_CONFIG,
                {"1/model.py": "import package_not_installed_here\n"})
    started = time.monotonic()
    with pytest.raises(server.TritonServerError) as caught:
        server.EmbeddedTriton(plus_one_repository, model_control="none", startup_timeout=120)
    assert time.monotonic() - started < 60
    lines = str(caught.value).splitlines()
    assert server.START_FAILED + " Internal - failed to load all models" in lines
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and processes_naming(plus_one_repository):
        time.sleep(0.2)
    assert processes_naming(plus_one_repository) == []


def processes_naming(path):
    """PIDs whose command line names ``path`` (a server on it, or its stubs)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if str(path) in line]


def test_a_server_that_keeps_a_failed_model_is_live_not_ready(plus_one_repository):
    write_model(plus_one_repository, "needs_a_package", PYTHON_CONFIG,
                {"1/model.py": "import package_not_installed_here\n"})
    flags = ["--exit-on-error=false"]
    with server.EmbeddedTriton(plus_one_repository, model_control="none", extra_args=flags,
                               wait_for="live", startup_timeout=60) as kept:
        # "Live" is the first answer; on a busy machine (CI runs two test workers) the
        # other endpoints may take a moment to agree. Read until they do, up to 30 s.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                kept.is_live() and not kept.is_ready() and kept.model_ready("plus_one")
                and not kept.model_ready("needs_a_package")):
            time.sleep(0.1)
        assert kept.is_live() and not kept.is_ready()
        assert kept.model_ready("plus_one") and not kept.model_ready("needs_a_package")
    # Waiting for "ready" on the same server can only time out: a clear error.
    with pytest.raises(server.TritonServerError, match="was not ready after 5 s"):
        server.EmbeddedTriton(plus_one_repository, model_control="none", extra_args=flags,
                              startup_timeout=5)
    with pytest.raises(ValueError, match="wait_for"):
        server.EmbeddedTriton(plus_one_repository, wait_for="loaded")


def test_missing_repository_is_refused(tmp_path):
    with pytest.raises(server.TritonServerError, match="is not a folder"):
        server.EmbeddedTriton(tmp_path / "nowhere")


def test_a_failed_load_carries_the_servers_reason(plus_one_repository):
    failing = "class TritonPythonModel:\n    def initialize(self, args):\n        raise ValueError('weights missing')\n"
    write_model(plus_one_repository, "fails_to_initialize", PYTHON_CONFIG, {"1/model.py": failing})
    with server.EmbeddedTriton(plus_one_repository) as triton:
        with pytest.raises(server.TritonServerError, match="(?s)loading model 'fails_to_initialize' failed.*weights missing"):
            triton.load("fails_to_initialize")
        # Strict readiness (Triton's default): a model that failed to load keeps the
        # server "not ready", even after an unload, until a load of that name succeeds.
        assert triton.is_live() and not triton.is_ready()
        triton.unload("fails_to_initialize")
        assert not triton.is_ready()
        write_model(plus_one_repository, "fails_to_initialize", PYTHON_CONFIG, {"1/model.py": PYTHON_MODEL})
        triton.load("fails_to_initialize")
        assert triton.is_ready()


def test_two_servers_at_once(plus_one_repository):
    with server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"]) as first, \
            server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"]) as second:
        assert first.http_port != second.http_port
        for triton, value in ((first, 1), (second, 2)):
            out = infer(triton, "plus_one", {"IN": np.array([[value]], dtype=np.int32)}, ["OUT"], protocol="grpc")
            assert out["OUT"].tolist() == [[value + 1]]


def test_explicit_ports(plus_one_repository):
    http, grpc, metrics = server._free_ports(3)
    with server.EmbeddedTriton(plus_one_repository, http_port=http, grpc_port=grpc, metrics_port=metrics) as triton:
        assert triton.http_url == f"127.0.0.1:{http}"
        assert triton.is_live()


def test_the_server_dies_with_its_parent(plus_one_repository, tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from tritonbook import server
        triton = server.EmbeddedTriton({str(plus_one_repository)!r}, load_models=["plus_one"])
        print(triton.pid, flush=True)
        time.sleep(600)
    """)
    # The killed parent cannot remove its work folder: put it under tmp_path, which
    # pytest removes, instead of leaving it in /tmp.
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        pgid = int(parent.stdout.readline())
        assert triton_processes(pgid)
    finally:
        parent.send_signal(signal.SIGKILL)  # no atexit, no cleanup: only the kernel's signal
        parent.wait()
    assert wait_gone(pgid, seconds=30) == []
    # Whatever /dev/shm regions its server left, the next server removes.
    server.remove_orphaned_shm_regions()
    assert region_names(f"{server.SHM_PREFIX}{parent.pid}-") == []


def region_names(prefix):
    return [region.name for region in server.shm_regions(prefix)]


def test_every_region_of_a_server_carries_its_prefix_and_stop_removes_them(plus_one_repository):
    with server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"]) as triton:
        prefix = triton.shm_prefix
        assert prefix.startswith(f"{server.SHM_PREFIX}{os.getpid()}-")
        # One region for each stub: plus_one has one instance.
        assert len(region_names(prefix)) == 1, region_names(prefix)
        # A killed stub leaves its region; Triton does not remove it, stop() does.
        stubs = [pid for pid in triton_processes(triton.pid) if pid != triton.pid]
        assert len(stubs) == 1, process_states(triton.pid)
        os.kill(stubs[0], signal.SIGKILL)
    assert wait_gone(triton.pid) == [], process_states(triton.pid)
    assert region_names(prefix) == [], (region_names(prefix), triton.log()[-2000:])


def serve_until_refused(url, protocol, stop, outcomes):
    """Send plus_one requests from one client until one fails; record the failure."""
    if protocol == "http":
        import tritonclient.http as module
    else:
        import tritonclient.grpc as module
    client = module.InferenceServerClient(url)
    sent = module.InferInput("IN", [1, 1], "INT32")
    sent.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    try:
        while not stop.is_set():
            client.infer("plus_one", [sent])
        outcomes.append((protocol, "stopped", None, time.monotonic()))
    except Exception as exc:  # what the client sees is the point of the test
        status = exc.status() if hasattr(exc, "status") else None
        outcomes.append((protocol, type(exc).__name__, status, time.monotonic()))
    finally:
        client.close()


def test_a_server_killed_under_load_fails_every_client_at_once_and_leaves_nothing(plus_one_repository):
    import threading

    triton = server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"])
    prefix, pgid = triton.shm_prefix, triton.pid
    stop, outcomes, clients = threading.Event(), [], []
    try:
        for protocol, url in (("http", triton.http_url), ("grpc", triton.grpc_url)):
            for _ in range(8):  # 16 requests in flight, half on each protocol
                clients.append(threading.Thread(
                    target=serve_until_refused, args=(url, protocol, stop, outcomes)))
        for client in clients:
            client.start()
        time.sleep(1.0)
        assert outcomes == []  # all sixteen are being served
        killed = time.monotonic()
        os.kill(pgid, signal.SIGKILL)
        for client in clients:
            client.join(timeout=30)
        assert not any(client.is_alive() for client in clients), "a client hangs"
        # Each client is told at once, with a connection error, not a wrong answer.
        assert len(outcomes) == 16 and all(o[1] != "stopped" for o in outcomes)
        assert max(o[3] for o in outcomes) - killed < 5
        # HTTP: the open connection closes (a request that reconnects is refused);
        # gRPC: UNAVAILABLE.
        http = {name for protocol, name, _, _ in outcomes if protocol == "http"}
        grpc = {(name, status) for protocol, name, status, _ in outcomes if protocol == "grpc"}
        assert http <= {"HTTPConnectionClosed", "ConnectionRefusedError", "ConnectionResetError",
                        "BrokenPipeError"}, http
        assert grpc == {("InferenceServerException", "StatusCode.UNAVAILABLE")}, grpc
        # The killed server's regions outlive it until its owner stops it.
        assert region_names(prefix)
    finally:
        stop.set()
        triton.stop()
    assert wait_gone(pgid) == []
    assert region_names(prefix) == []
    with server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"]) as again:
        out = infer(again, "plus_one", {"IN": np.array([[1]], dtype=np.int32)}, ["OUT"])
        assert out["OUT"].tolist() == [[2]]


def test_a_new_server_removes_the_regions_of_a_gone_process_only(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = f"{server.SHM_PREFIX}{gone.pid}-0badc0de-region"
    live = f"{server.SHM_PREFIX}{os.getpid()}-0badc0de-region"
    unrelated = "tritonbook_test_unrelated"
    try:
        for name in (orphan, live, unrelated):
            (Path("/dev/shm") / name).write_bytes(b"\0" * 64)
        assert server.remove_orphaned_shm_regions() == [orphan]
        assert region_names(live) == [live] and region_names(unrelated) == [unrelated]
    finally:
        for name in (orphan, live, unrelated):
            (Path("/dev/shm") / name).unlink(missing_ok=True)


def private_dev_shm_works() -> bool:
    """True where this process may mount a tmpfs of its own over /dev/shm (root, and
    a kernel that lets it make a mount namespace)."""
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not private_dev_shm_works(), reason="needs root and mount namespaces")
def test_a_full_dev_shm_refuses_the_load_with_the_backends_message(plus_one_repository):
    # A 64 KiB /dev/shm, private to this server (a mount namespace): smaller than the
    # 1 MiB region each python model instance needs, as a full one is.
    script = textwrap.dedent(f"""
        from tritonbook import server
        with server.EmbeddedTriton({str(plus_one_repository)!r}) as triton:
            try:
                triton.load("plus_one")
            except server.TritonServerError as error:
                print(error.reason or error)
    """)
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f'mount -t tmpfs -o size=64k tmpfs /dev/shm && exec "$0" -c "$1"', sys.executable, script],
        capture_output=True, text=True, timeout=120)
    said = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Unable to initialize shared memory key" in said, said
    assert "Each Python backend model instance requires at least 1 MB" in said
    assert "No space left on device" in said


def test_remote_server_from_environment(plus_one_repository):
    with server.EmbeddedTriton(plus_one_repository, load_models=["plus_one"]) as triton:
        remote = server.remote_from_environment(
            {"TRITON_URL": f"http://{triton.http_url}", "TRITON_GRPC_URL": triton.grpc_url}
        )
        assert isinstance(remote, server.RemoteTriton)
        info = remote.info()
        # The embedded server names itself, so a client can tell stand-ins are in use.
        assert info.embedded and info.version == "2.51.0" and info.standins == ["pytorch", "onnxruntime", "torch_aoti_standin"]
        out = infer(remote, "plus_one", {"IN": np.array([[1]], dtype=np.int32)}, ["OUT"], protocol="grpc")
        assert out["OUT"].tolist() == [[2]]
        # Metrics: TRITON_METRICS_URL, else port 8002 on the HTTP host (the container's).
        assert remote.metrics_url == triton.http_url.rsplit(":", 1)[0] + ":8002"
        named = server.remote_from_environment({"TRITON_URL": triton.http_url,
                                                "TRITON_METRICS_URL": f"http://{triton.metrics_url}"})
        assert named.metrics_url == triton.metrics_url and named.grpc_url.endswith(":8001")
        remote.stop()  # closes clients only
        assert triton.is_live()


def test_remote_server_that_does_not_answer_is_a_clear_error():
    (port,) = server._free_ports(1)
    started = time.monotonic()
    with pytest.raises(server.TritonServerError, match="no live Triton server answers"):
        server.remote_from_environment({"TRITON_URL": f"127.0.0.1:{port}"})
    assert time.monotonic() - started < 10


def test_no_remote_without_the_variable():
    assert server.remote_from_environment({}) is None


def test_python_models_see_this_environment_even_when_it_is_not_activated(plus_one_repository):
    # The stub finds its prefix through PATH (on Python 3.11+ the 24.10 stub also ignores
    # PYTHONPATH, book/versions.md); a server started
    # by an interpreter whose venv is not on PATH must still give models torch and tritonbook.
    probe = """
import triton_python_backend_utils as pb_utils
import torch, tritonbook

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT",
            pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 0 + len(torch.__version__))])
            for r in requests]
"""
    write_model(plus_one_repository, "imports_torch", PYTHON_CONFIG, {"1/model.py": probe})
    script = textwrap.dedent(f"""
        import numpy as np
        from tritonbook import server
        from tritonbook.client import infer
        with server.EmbeddedTriton({str(plus_one_repository)!r}, load_models=["imports_torch"]) as triton:
            out = infer(triton, "imports_torch", {{"IN": np.zeros((1, 1), np.int32)}}, ["OUT"])
            print(int(out["OUT"][0, 0]))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    import torch

    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == len(torch.__version__)


def test_the_24_10_stub_reads_pythonpath_only_below_python_3_11(tmp_path, monkeypatch):
    # book/versions.md: the 24.10 stub embeds Python with pybind11 2.10, which starts an
    # isolated interpreter (no PYTHONPATH) on Python 3.11 and newer, and the legacy one
    # (PYTHONPATH read) on 3.10. The 26.08 container's stub (pybind11 2.12) reads it.
    extra = tmp_path / "on_pythonpath"
    extra.mkdir()
    (extra / "pythonpath_probe.py").write_text("FOUND = 1\n")
    probe = """
import numpy as np
import triton_python_backend_utils as pb_utils
try:
    from pythonpath_probe import FOUND
except ImportError:
    FOUND = 0

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", np.full((1, 1), FOUND, np.int32))]) for r in requests]
"""
    repository = tmp_path / "models"
    write_model(repository, "pythonpath_probe", PYTHON_CONFIG, {"1/model.py": probe})
    monkeypatch.setenv("PYTHONPATH", str(extra))
    with server.EmbeddedTriton(repository, load_models=["pythonpath_probe"]) as triton:
        out = infer(triton, "pythonpath_probe", {"IN": np.zeros((1, 1), np.int32)}, ["OUT"])
    assert int(out["OUT"][0, 0]) == (1 if sys.version_info < (3, 11) else 0)


def test_request_counts_add_the_compute_time_when_asked(book_server):
    book_server.load("slow_python")
    before = request_counts(book_server, "slow_python", compute=True)
    infer(book_server, "slow_python", {"MS": np.array([[120]], np.int32)}, ["WORKED_MS"])
    after = request_counts(book_server, "slow_python", grown_from=before, compute=True)
    # The model works 120 ms in 10 ms steps; its execution's compute time holds them.
    assert 120 <= after["compute_ms"] - before["compute_ms"] < 2000
    assert set(request_counts(book_server, "slow_python")) == {"inference_count", "execution_count"}


def test_burst_keeps_sizes_apart_unless_the_input_is_ragged(book_server):
    from tritonbook import loadgen

    images = [np.full((1, 3, s, s), 0.5, np.float32) for s in (8, 12, 8, 12)]
    requests = [{"IMAGE": image} for image in images]
    outputs = ["INVERTED", "SIZES"]
    book_server.load("batch_python")
    answers, runs = loadgen.burst(book_server, "batch_python", requests, outputs)
    for image, answer in zip(images, answers):
        np.testing.assert_allclose(answer["INVERTED"], 1 - image)
    # Whatever the order of arrival, no execution held two sizes.
    assert [int(a["SIZES"][0, 0]) for a in answers] == [1] * 4
    assert 2 <= runs <= 4
    ragged = repository.read_config("batch_python")
    ragged["input"][0]["allow_ragged_batch"] = True
    book_server.load("batch_python", ragged)
    try:
        answers, runs = loadgen.burst(book_server, "batch_python", requests, outputs)
    finally:
        book_server.load("batch_python", repository.read_config("batch_python"))
    # Sent at once, within the batcher's 50 ms: one execution held both sizes.
    assert max(int(a["SIZES"][0, 0]) for a in answers) == 2 and runs < 4
    with pytest.raises(RuntimeError, match="request 0: .*unexpected shape"):
        loadgen.burst(book_server, "batch_python", [{"IMAGE": np.zeros((1, 2), np.float32)}],
                      outputs)


def test_a_fork_after_grpc_threads_writes_nothing_to_the_notebook():
    # server.start() forks with descriptor 2 sent to /dev/null (grpcio's fork notice);
    # the descriptor comes back afterwards.
    code = ("import os; from tritonbook.server import _fork_notice_silenced\n"
            "with _fork_notice_silenced():\n    os.write(2, b'hidden')\n"
            "os.write(2, b'shown')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stderr == "shown"


def test_request_counts_wait_for_the_statistics(book_server):
    book_server.load("affine_python")
    before = request_counts(book_server, "affine_python")
    infer(book_server, "affine_python", {"INPUT__0": np.zeros((3, 4), np.float32)}, ["OUTPUT__0"])
    after = request_counts(book_server, "affine_python", grown_from=before)
    assert {key: after[key] - before[key] for key in before} == {"inference_count": 3, "execution_count": 1}
    # Nothing more arrives: the wait gives up after its timeout and returns the counts.
    started = time.monotonic()
    assert request_counts(book_server, "affine_python", grown_from=after, timeout=0.3) == after
    assert time.monotonic() - started >= 0.3


def test_the_wheel_has_one_stub_per_python_and_the_server_uses_this_ones():
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stubs = server.python_stubs()
    assert {"3.10", "3.11", "3.12"} <= set(stubs) and version in stubs
    line = server.stub_libpython(stubs[version])
    assert line.startswith(f"libpython{version}.so") and "not found" not in line
    other = next(v for v in stubs if v != version)
    assert server.stub_libpython(stubs[other]).startswith(f"libpython{other}.so")


def test_extra_environment_puts_search_paths_first_and_sets_the_rest(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libkept.so")
    monkeypatch.setenv("TRITONBOOK_EXAMPLE", "old")
    wheel = server._wheel_paths()
    plain = server._server_environment(wheel)
    env = server._server_environment(wheel, {"LD_PRELOAD": "/opt/ops/libops.so",
                                             "LD_LIBRARY_PATH": "/opt/torch/lib",
                                             "TRITONBOOK_EXAMPLE": "new"})
    assert env["LD_PRELOAD"] == "/opt/ops/libops.so:/usr/lib/libkept.so"
    assert env["LD_LIBRARY_PATH"] == "/opt/torch/lib:" + plain["LD_LIBRARY_PATH"]
    assert env["TRITONBOOK_EXAMPLE"] == "new"  # not a search path: replaced
    assert server._server_environment(wheel, {}) == plain
