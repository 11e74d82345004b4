"""Chapter 7's instruments: the Prometheus endpoint, the health endpoints as a load
balancer reads them, the server's processes and sockets, and shared-memory regions; and
the small network that chapter 14's thread and batcher sections load (``small_cnn``).

Everything here reads a real server; nothing stands in for one.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tritonbook.server import SHM_PREFIX

__all__ = ["scrape", "model_counters", "metrics_table", "MetricsRecorder", "health_codes",
           "stub_processes", "stub_region", "wait_dead", "listening_addresses", "shm_segments",
           "machine_name", "COUNTERS", "GPU_RUN", "gpu_run", "gpu_device", "gpu_run_half", "small_cnn", "small_cnn_onnx",
           "standin_share", "instance_device",
           "stub_shm", "stub_python", "wait_counted"]

# The per-model counters Triton exports, by the names this book uses for them.
COUNTERS = {"requests": "nv_inference_request_success", "inferences": "nv_inference_count",
            "executions": "nv_inference_exec_count", "queue": "nv_inference_queue_duration_us",
            "input": "nv_inference_compute_input_duration_us",
            "infer": "nv_inference_compute_infer_duration_us",
            "output": "nv_inference_compute_output_duration_us"}


def scrape(metrics_url: str, timeout: float = 5.0) -> dict[tuple[str, tuple], float]:
    """Every sample on ``http://<metrics_url>/metrics``: ``{(name, labels): value}``,
    where ``labels`` is a sorted tuple of ``(label, value)`` pairs."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=timeout) as answer:
        text = answer.read().decode()
    # Prometheus' own parser: label escapes, NaN and +Inf values, HELP and TYPE lines. It
    # names a counter's sample <family>_total, the OpenMetrics way; Triton exposes its
    # counters without that suffix (nv_inference_count), and Prometheus stores them as
    # exposed, so the names here are Triton's.
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.type == "counter" and name == family.name + "_total":
                name = family.name
            samples[name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def model_counters(samples: dict, model: str) -> dict[str, float]:
    """The ``COUNTERS`` of one model, summed over its versions."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    for (name, labels), value in samples.items():
        if dict(labels).get("model") != model:
            continue
        for key, metric in COUNTERS.items():
            if name == metric:
                totals[key] += value
    return totals


def metrics_table(before: dict, after: dict, models: Sequence[str]):
    """What happened between two scrapes, per model: the counts, and mean milliseconds
    per request queued and in each compute phase."""
    import pandas as pd

    rows = []
    for model in models:
        start, end = model_counters(before, model), model_counters(after, model)
        delta = {key: end[key] - start[key] for key in COUNTERS}
        requests = delta["requests"]
        row = {"model": model, "requests": int(requests), "inferences": int(delta["inferences"]),
               "executions": int(delta["executions"])}
        for phase in ("queue", "input", "infer", "output"):
            row[f"{phase} ms"] = delta[phase] / requests / 1e3 if requests else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")


class _Poller:
    """A thread that runs ``_run`` while the ``with`` block runs; ``_run`` waits on
    ``self._stop`` between rounds and returns once it is set."""

    def __init__(self, period: float):
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class MetricsRecorder(_Poller):
    """Scrape the metrics endpoint every ``period`` seconds in a thread, as Prometheus
    would, while the ``with`` block runs. ``frames`` holds ``(seconds, samples)``."""

    def __init__(self, metrics_url: str, period: float = 0.5):
        super().__init__(period)
        self.metrics_url = metrics_url
        self.frames: list[tuple[float, dict]] = []

    def _run(self) -> None:
        started = time.perf_counter()
        while True:
            self.frames.append((time.perf_counter() - started, scrape(self.metrics_url)))
            if self._stop.wait(self.period):
                self.frames.append((time.perf_counter() - started, scrape(self.metrics_url)))
                return

    def plot(self, models: Sequence[str], title: str):
        """Queue and compute ms per request, per scrape interval, one panel per model:
        what a dashboard built on these counters draws."""
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(models), figsize=(11, 3.5), sharey=True, squeeze=False)
        for ax, model in zip(axes[0], models):
            series = self.series(model).dropna()
            ax.plot(series["seconds"], series["compute ms"], marker=".", label="compute")
            ax.plot(series["seconds"], series["queue ms"], marker=".", label="queue")
            ax.set_title(model)
            ax.set_xlabel("seconds since the first scrape")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"ms per request, per {self.period:g} s scrape")
        axes[0][0].legend()
        fig.suptitle(title)
        fig.tight_layout()
        return fig

    def series(self, model: str):
        """Per scrape interval: requests finished, and their mean queue and compute ms."""
        import pandas as pd

        rows = []
        for (t0, a), (t1, b) in zip(self.frames, self.frames[1:]):
            start, end = model_counters(a, model), model_counters(b, model)
            requests = end["requests"] - start["requests"]
            compute = sum(end[p] - start[p] for p in ("input", "infer", "output"))
            rows.append({"seconds": t1, "requests": requests,
                         "queue ms": (end["queue"] - start["queue"]) / requests / 1e3 if requests else None,
                         "compute ms": compute / requests / 1e3 if requests else None})
        return pd.DataFrame(rows)


class HealthWatcher(_Poller):
    """Ask the health endpoints (``health_codes``) every ``period`` seconds in a thread
    while the ``with`` block runs, as a load balancer would. ``polls`` holds
    ``(perf_counter time the answers arrived, {endpoint: HTTP status})``."""

    def __init__(self, http_url: str, model: str, period: float = 0.05):
        super().__init__(period)
        self.http_url, self.model = http_url, model
        self.polls: list[tuple[float, dict[str, int]]] = []

    def _run(self) -> None:
        while not self._stop.is_set():
            codes = health_codes(self.http_url, self.model)
            # The time of the answer: one asked during a load may answer after it.
            self.polls.append((time.perf_counter(), codes))
            self._stop.wait(self.period)

    def ready_before(self, moment: float) -> dict[str, int]:
        """Of the polls answered before ``moment`` (a ``perf_counter`` time): how many
        there were, and how many of them each endpoint answered 200."""
        early = [codes for t, codes in self.polls if t < moment]
        counts = {"polls": len(early)}
        for endpoint in (f"{self.model} ready", "ready"):
            counts[endpoint] = sum(codes[endpoint] == 200 for codes in early)
        return counts


def wait_counted(triton, counts: dict[str, int], timeout: float = 10.0) -> dict[str, dict]:
    """Wait until the server's statistics count at least ``counts[model]`` successful
    requests for each model, and return their totals (``loadgen.server_totals``). A
    backend reports an execution's statistics after its responses have left, so a
    client can hold every answer before the server has counted the last of them: two
    reads of the counters (the metrics, the statistics API) taken then can differ.
    TimeoutError if a count is not reached."""
    from tritonbook.loadgen import server_totals

    deadline = time.monotonic() + timeout
    while True:
        totals = {model: server_totals(triton, model) for model in counts}
        short = {m: t["requests"] for m, t in totals.items() if t["requests"] < counts[m]}
        if not short:
            return totals
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:g} s the server counts {short}, "
                               f"not {counts}")
        time.sleep(0.05)


def health_codes(http_url: str, model: str | None = None) -> dict[str, int]:
    """The HTTP status of each health endpoint, as a load balancer or a probe sees it:
    200 means yes; anything else, or no answer (0), means no."""
    paths = {"live": "/v2/health/live", "ready": "/v2/health/ready"}
    if model is not None:
        paths[f"{model} ready"] = f"/v2/models/{model}/ready"
    codes = {}
    for label, path in paths.items():
        try:
            with urllib.request.urlopen(f"http://{http_url}{path}", timeout=5) as answer:
                codes[label] = answer.status
        except urllib.error.HTTPError as error:
            codes[label] = error.code
        except OSError:
            codes[label] = 0
    return codes


def index_status(http_url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """POST ``/v2/repository/index`` with ``headers``: the HTTP status, and the server's
    error text when it refused (a restricted API answers 403 without its header)."""
    request = urllib.request.Request(f"http://{http_url}/v2/repository/index", data=b"{}",
                                     headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def stub_processes(server_pid: int, model: str | None = None) -> list:
    """The live python backend stubs of ``model``'s instances (``<model>_<group>_<n>``),
    or of every model's with ``model=None``, children of the server process
    ``server_pid``; psutil processes."""
    import psutil

    instance = re.compile(rf"^{re.escape(model) if model else '.+'}_\d+_\d+$")
    found = []
    for child in psutil.Process(server_pid).children(recursive=True):
        try:
            command = child.cmdline()
            if child.status() == psutil.STATUS_ZOMBIE or not command:
                continue
        except psutil.NoSuchProcess:
            continue
        if command[0].endswith("triton_python_backend_stub") and any(instance.match(a) for a in command):
            found.append(child)
    return found


def wait_for_stubs(server_pid: int, model: str, count: int, timeout: float = 15.0) -> list:
    """``stub_processes`` once ``model`` has ``count`` live stubs, or after ``timeout``
    seconds, whichever comes first. A load or unload returns before a replaced stub has
    exited, so a count taken at once can still see it."""
    deadline = time.monotonic() + timeout
    while True:
        found = stub_processes(server_pid, model)
        if len(found) == count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def stub_region(process) -> str:
    """The name in ``/dev/shm`` of the region a stub shares with the server (from its
    command line). A stub that is killed leaves it behind, and Triton does not remove
    it, not even at exit (chapter 7); the book's embedded server does when it stops.
    Triton names it ``triton_python_backend_shm_region_<uuid>`` unless the backend
    option ``shm-region-prefix-name`` replaces the prefix, as the embedded server does
    (``tritonbook.server.SHM_PREFIX``)."""
    prefixes = ("triton_python_backend_shm_region_", SHM_PREFIX)
    [region] = [a for a in process.cmdline() if a.startswith(prefixes)]
    return region


def wait_dead(process, timeout: float = 10.0) -> None:
    """Wait until a killed process has stopped: gone, or a zombie (the server does not
    reap a stub it did not stop, so the dead stub stays in the process table)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise TimeoutError(f"process {process.pid} still running {timeout:.0f} s after the signal")


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on."""
    import psutil

    sockets = psutil.Process(pid).net_connections(kind="inet")
    return sorted({(s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN})


def shm_segments(prefix: str = "") -> list[str]:
    """The names in ``/dev/shm`` that start with ``prefix``."""
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix))


def stub_shm(triton) -> dict:
    """The ``/dev/shm`` that an embedded server and its python stubs see (their own,
    with ``dev_shm_bytes``): its size and what is in use, and the size of each stub's
    region (one per python model instance), all in MiB."""
    folder = Path(f"/proc/{triton.pid}/root/dev/shm")  # the server's mount namespace
    usage = os.statvfs(folder)
    regions = [p.stat().st_size / 2**20 for p in folder.iterdir()
               if p.name.startswith(triton.shm_prefix)]
    return {"size MiB": usage.f_blocks * usage.f_frsize / 2**20,
            "used MiB": (usage.f_blocks - usage.f_bfree) * usage.f_frsize / 2**20,
            "regions MiB": sorted(regions)}


# A python model that answers which Python runs it: the stub's.
_PYTHON_PROBE = b"""
import json
import platform
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        python = {"version": platform.python_version(), "base_prefix": sys.base_prefix}
        answer = np.array([json.dumps(python).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PYTHON", answer)]) for _ in requests]
"""


def stub_python(triton, model: str = "python_probe") -> dict[str, str]:
    """Which Python ``triton``'s python backend stub runs: its ``version`` (``3.11.7``)
    and ``base_prefix`` (where that Python is installed), asked of the server itself: a
    probe model is uploaded through the load API, asked once and unloaded. Works for any
    server that accepts the load API, the container included (its stub runs the image's
    Python, not the client's). A venv made here serves a model there only if both match
    (``repository.pack_python_environment``)."""
    import numpy as np

    from tritonbook.client import infer

    config = {"backend": "python", "max_batch_size": 0,
              "input": [{"name": "ASK", "data_type": "TYPE_BOOL", "dims": [1]}],
              "output": [{"name": "PYTHON", "data_type": "TYPE_STRING", "dims": [1]}]}
    triton.load(model, config, files={"file:1/model.py": _PYTHON_PROBE})
    try:
        answer = infer(triton, model, {"ASK": np.array([True])}, ["PYTHON"])
    finally:
        triton.unload(model)
    return json.loads(answer["PYTHON"][0])


def small_cnn():
    """Chapter 14's small convolutional network: three 3x3 convolutions, 3 channels in,
    16 inside, 3 out, so any image size works; seeded, so every call builds the same
    weights (the chapter on two CPU cores and the book's GPU run load the same network)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 3, 3, padding=1),
    ).eval()


def instance_device(config: dict) -> str:
    """The torch device a model's instances run on, from its (served) config: "cuda"
    when its instance groups are GPU groups, "cpu" when they are CPU groups. A model
    with groups of both kinds runs on both, so one device cannot stand for it: that is a
    ValueError naming the kinds."""
    kinds = sorted({group.get("kind", "KIND_AUTO") for group in config["instance_group"]})
    if kinds == ["KIND_GPU"]:
        return "cuda"
    if kinds == ["KIND_CPU"]:
        return "cpu"
    raise ValueError(f"{config.get('name', 'the model')}'s instance groups are {kinds}: "
                     "give it KIND_CPU groups or KIND_GPU groups, not both")


def standin_share(triton, model: str, inputs: dict, torchscript: bytes,
                  batches: Sequence[int] = (1, 8), repeats: int = 200):
    """What serving adds to an execution of ``model``, at each batch in ``batches``.

    The server's compute time per execution (perf_analyzer, one request of ``batch``
    rows in flight, so that nothing competes for the cores) against ``repeats`` calls of
    the same TorchScript file (``torchscript``, the bytes the server loaded) in this
    process, on the device the model's instance groups name. Mean against mean:
    the server reports a mean per execution. ``inputs``: one row per input, as
    ``perf.run`` takes them; the file is called with the first. A pandas table, one
    row per batch."""
    import io

    import numpy as np
    import pandas as pd
    import torch

    from tritonbook import perf
    from tritonbook.measure import time_call

    device = instance_device(triton.http().get_model_config(model))
    same_file = torch.jit.load(io.BytesIO(torchscript), map_location=device).eval()
    first = next(iter(inputs.values()))
    rows = []
    for batch in batches:
        served, = perf.run(triton, model, inputs, batch=batch, concurrency=[1],
                           window_s=0.5, stability=20, percentile=None, max_trials=20,
                           attempts=3)
        if not served.stable:
            raise perf.PerfAnalyzerError(f"{model} at batch {batch} did not settle")
        x = torch.from_numpy(first).repeat(batch, *[1] * (first.ndim - 1)).to(device)
        with torch.inference_mode():
            alone = time_call(lambda x=x: same_file(x), f"batch {batch}", repeats=repeats)
        execution = served.execution_ms()
        forward = float(np.mean(alone.seconds)) * 1e3
        rows.append({
            "batch": batch,
            "served, ms per execution": execution,
            "network alone, mean ms": forward,
            "q1-q3 alone, ms": "-".join(f"{q * 1e3:.2f}" for q in alone.quartiles),
            "added by serving, ms": execution - forward,
            "added, % of execution": 100 * (1 - forward / execution),
        })
    return pd.DataFrame(rows).set_index("batch")


def small_cnn_onnx(net) -> bytes:
    """``net`` (``small_cnn()``) as an ONNX file, ready for ``Triton.load(files=...)``:
    inputs and outputs named as the PyTorch backend names them (``input__0``,
    ``output__0``), so one config serves both forms, with batch, height and width free.
    The TorchScript-based exporter (``dynamo=False``, deprecated since PyTorch 2.9):
    for three convolutions it writes the same graph in a fraction of the time and
    prints nothing into the chapter; chapter 4 shows the torch.export-based one."""
    import io

    import torch

    buffer = io.BytesIO()
    free = {0: "batch", 2: "height", 3: "width"}
    torch.onnx.export(net, (torch.rand(1, 3, 64, 64),), buffer, dynamo=False,
                      input_names=["input__0"], output_names=["output__0"],
                      dynamic_axes={"input__0": free, "output__0": free})
    return buffer.getvalue()


def machine_name() -> str:
    """The machine this process runs on, in a few words: its CPU model, core count
    and GPUs (as torch sees them), for a result that names where it was measured."""
    import os

    import torch

    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{cpu}, {os.cpu_count()} cores, " + (", ".join(gpus) or "no GPU")


# The book's saved GPU run: what the GPU script measured on lent GPU machines, shown in
# book/gpu.md; the chapters read their GPU numbers from it.
GPU_RUN = Path(__file__).resolve().parent.parent / "book" / "gpu_run.json"


def gpu_run() -> dict:
    """The saved GPU run (``book/gpu_run.json``), each section with the call that made it."""
    return json.loads(GPU_RUN.read_text())


def gpu_run_half(call: str) -> dict:
    """One call of the saved GPU runs of the half-width network, the width the CPU
    chapters serve (``book/gpu_run_half.json``), with its GPU under ``device``."""
    record = json.loads(GPU_RUN.with_name("gpu_run_half.json").read_text())[call]
    return {**record, "device": record["environment"]["device"]}


def gpu_device(record: dict, section: str) -> str:
    """The GPU that ran ``section`` of a saved GPU run."""
    call = record[section]["run"]
    return next(run["device"] for run in record["runs"] if run["run"] == call)
