"""NVIDIA's load generator, ``perf_analyzer``, run from Python on the book's servers.

``perf_analyzer`` is a C++ program. It ships inside the ``tritonclient`` wheels up to
2.60 (``bin/perf_analyzer``), in the SDK container
(``nvcr.io/nvidia/tritonserver:<YY.MM>-py3-sdk``), and in the ``perf-analyzer``
package on PyPI, whose wheels need a newer system than this book's (older ones get a
0.1.0 placeholder without the binary). ``make venv`` takes it from the 2.51.0 wheel,
built for the same release as the embedded server, with ``install``. It needs two
shared libraries that the wheel does not carry: ``libb64.so.0d`` (Debian's
``libb64-0d``, in the README's apt line) and ``libcudart.so.12`` (the
``nvidia-cuda-runtime-cu12`` wheel in ``requirements.txt``; it loads without a GPU).

``run`` measures one model at each concurrency (closed loop) or request rate (open
loop, Poisson arrivals) and returns one ``Point`` per load level: throughput, latency
percentiles, the sample count they rest on, and the server's own breakdown of a
request (queue, compute input, infer and output, and the rest, "overhead").

    points = perf.run(triton, "srcnn", {"input": low, "factor": scale}, concurrency=[1, 2])
    perf.table(points)

``highest_rate`` asks perf_analyzer the capacity planner's question: the highest rate of
Poisson arrivals whose latency percentile meets an objective (its binary search under
``--latency-threshold``).

Each point is measured in windows until the last three agree within ``stability``
percent in throughput and in the stabilising latency (p95 by default, perf_analyzer's
``--percentile``). A level that never agrees within ``max_trials`` windows comes back
with ``stable=False`` and no numbers. perf_analyzer has two kinds of window (its
measurement docs):

* count windows (``window_requests``, the default here): a window starts at 1 s and
  grows until it holds that many answers. Right for slow models: a GFPGAN face takes
  most of a second, and a window of fixed length could hold none.
* time windows (``window_s``): a window lasts that long (perf_analyzer waits 1.2 times
  it). Right for models that answer hundreds of requests a second, where a count window
  can never be shorter than 1 s and holds ten times the answers it asked for. On the
  tiny model of chapter 13, 0.25 s windows took a third of the time of count windows
  of 50; where shorter windows need more of them to agree, the gain is smaller.

The quick profile (``tritonbook.profile``, CI's) runs each level in three short windows
that always count as settled (a 1000 % stability threshold), once: its numbers carry no
conclusion, and every check on them still runs.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonbook import profile

__all__ = ["Point", "RateSearch", "PerfAnalyzerError", "highest_rate", "binary", "install", "missing_libraries", "run", "table",
           "plot_latency_throughput", "capacity", "series_table", "layouts_table", "knee",
           "saturation"]

# The wheel that carries perf_analyzer for the embedded server's release (r24.10).
WHEEL = "tritonclient==2.51.0"
MEMBER = "tritonclient-2.51.0.data/data/bin/perf_analyzer"


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer could not run, or refused the command; the message says why."""


def _venv() -> Path:
    return Path(sys.prefix)


def binary() -> Path:
    """Where ``install`` puts perf_analyzer: inside the running virtual environment."""
    return _venv() / "libexec" / "perf_analyzer"


def install(target: Path | None = None) -> Path:
    """Take perf_analyzer out of the tritonclient 2.51.0 wheel (pip download, no
    dependencies) and put it at ``target`` (default ``binary()``)."""
    target = binary() if target is None else Path(target)
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--dest", folder, WHEEL], check=True)
        wheel = next(Path(folder).glob("tritonclient-*.whl"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive, open(target, "wb") as out:
            out.write(archive.read(MEMBER))
    target.chmod(0o755)
    return target


def _environment() -> dict[str, str]:
    """The environment with the CUDA runtime wheel's folder on the library path."""
    try:
        import nvidia.cuda_runtime
    except ImportError:  # no CUDA 12 runtime wheel: the loader's own path must do
        return dict(os.environ)

    lib = str(Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (lib, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def missing_libraries() -> list[str]:
    """The shared libraries perf_analyzer needs and the loader cannot find (``ldd``, with
    the CUDA runtime wheel on the path): empty when it can run."""
    import shutil

    ldd = shutil.which("ldd")
    if ldd is None or not binary().exists():
        return []
    found = subprocess.run([ldd, str(binary())], capture_output=True, text=True,
                           env=_environment()).stdout
    return [line.split()[0] for line in found.splitlines() if "not found" in line]


@dataclass(frozen=True)
class Point:
    """One load level, as perf_analyzer measured it (times in milliseconds)."""

    model: str
    mode: str  # "concurrency" or "request rate"
    load: float  # requests in flight, or requests per second offered
    stable: bool
    requests: int = 0  # answers in the reported windows: what the percentiles rest on
    infer_per_s: float = math.nan
    mean: float = math.nan  # the client's mean latency
    p50: float = math.nan
    p90: float = math.nan
    p95: float = math.nan
    p99: float = math.nan
    # The server's mean per request over the same windows.
    queue: float = math.nan
    compute_input: float = math.nan
    compute_infer: float = math.nan
    compute_output: float = math.nan
    overhead: float = math.nan
    # perf_analyzer's own side, the mean per request over the same windows: building and
    # sending the request, and reading the answer. The rest of the client's latency
    # beyond the server's time is the socket and the wait for the answer.
    client_send: float = math.nan
    client_recv: float = math.nan
    executions: int = 0
    inferences: int = 0
    server_requests: int = 0  # the requests those executions carried
    # Request rate only: the percentage of requests perf_analyzer sent late, because
    # it could not keep up with the rate it was asked for.
    delayed: float = 0.0
    command: str = ""  # the perf_analyzer command line that measured this level
    # From the server's batch statistics over the level's whole run (warm-up and
    # every window): the instances' mean compute time per execution, each execution
    # once, and the mean inferences (batch rows) one execution carried.
    exec_ms: float = math.nan
    exec_inferences: float = math.nan
    attempts: int = 1  # runs of perf_analyzer this level took (``run``'s ``attempts``)

    def execution_ms(self) -> float:
        """One execution's compute time (input, infer, output) behind the level's numbers.

        Where every execution of the reported windows carried one request, it is those
        windows' own mean: measured over the same span as the throughput. Where the
        batcher merged requests, the windows' means credit each request of a batch with
        the whole batch's time, so it is the batch statistics over the level's whole run
        (``exec_ms``), each execution once."""
        if self.executions and self.executions == self.server_requests:
            return self.compute_input + self.compute_infer + self.compute_output
        return self.exec_ms

    def server_ms(self) -> float:
        """The server's mean time per request over the reported windows: queue, compute
        and its own overhead. What the client measures beyond it is client and socket."""
        return (self.queue + self.compute_input + self.compute_infer + self.compute_output
                + self.overhead)

    def tail(self, q: int) -> float:
        """The ``q`` percentile, or NaN when fewer than five answers lie beyond it:
        a p95 needs 100 answers and a p99 500."""
        if self.requests * (100 - q) / 100 < 5:
            return math.nan
        return {50: self.p50, 90: self.p90, 95: self.p95, 99: self.p99}[q]

    def row(self) -> dict:
        return {"model": self.model, self.mode: self.load, "stable": self.stable,
                "requests": self.requests, "infer/s": self.infer_per_s,
                "p50 ms": self.p50, "p95 ms": self.tail(95), "p99 ms": self.tail(99),
                "server queue ms": self.queue, "server input ms": self.compute_input,
                "server infer ms": self.compute_infer,
                "server output ms": self.compute_output,
                "server overhead ms": self.overhead,
                "mean batch": self.inferences / self.executions if self.executions else math.nan,
                "server ms per execution": self.execution_ms(),
                **({"delayed %": self.delayed} if self.mode == "request rate" else {})}


_COUNT = re.compile(r"^\s*Request count: (\d+)", re.M)
_SERVER = re.compile(r"Inference count: (\d+)\s+Execution count: (\d+)")
_SUCCESS = re.compile(r"Successful request count: (\d+)")
# The client's mean latency: printed as such where no --percentile is set, else only as
# the mean time of a gRPC or HTTP call (the same span).
_MEAN = re.compile(r"Avg (?:latency|gRPC time|HTTP time): (\d+) usec")
_OVERHEAD = re.compile(r"\(overhead (\d+) usec")
_DELAYED = re.compile(r"([\d.]+)% of the requests were delayed")


def _parse(stdout: str, csv_path: Path, model: str, mode: str, load: float,
           command: str) -> Point:
    """One level's Point from perf_analyzer's CSV and its printed report."""
    if "Failed to obtain stable measurement" in stdout or not csv_path.exists():
        return Point(model, mode, load, stable=False, command=command)
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) != 1:
        raise PerfAnalyzerError(f"expected one row in {csv_path}, found {len(rows)}")
    # One level per perf_analyzer call, so the report holds one of each.
    return _point(stdout, rows[0], model, mode, load, command)


def _point(stdout: str, row: dict, model: str, mode: str, load: float,
           command: str) -> Point:
    """A settled level's Point from its CSV row and its part of the printed report."""
    count, server = _COUNT.search(stdout), _SERVER.search(stdout)
    success = _SUCCESS.search(stdout)
    overhead, delayed = _OVERHEAD.search(stdout), _DELAYED.search(stdout)
    mean = _MEAN.search(stdout)

    def ms(column: str) -> float:
        return float(row[column]) / 1e3  # perf_analyzer writes microseconds

    return Point(
        model, mode, load, stable=True,
        requests=int(count.group(1)) if count else 0,
        infer_per_s=float(row["Inferences/Second"]),
        mean=int(mean.group(1)) / 1e3 if mean else math.nan, p50=ms("p50 latency"), p90=ms("p90 latency"), p95=ms("p95 latency"),
        p99=ms("p99 latency"), queue=ms("Server Queue"),
        compute_input=ms("Server Compute Input"),
        compute_infer=ms("Server Compute Infer"),
        compute_output=ms("Server Compute Output"),
        overhead=int(overhead.group(1)) / 1e3 if overhead else math.nan,
        client_send=ms("Client Send"), client_recv=ms("Client Recv"),
        inferences=int(server.group(1)) if server else 0,
        executions=int(server.group(2)) if server else 0,
        server_requests=int(success.group(1)) if success else 0,
        delayed=float(delayed.group(1)) if delayed else 0.0, command=command)


def _target(model: str, url: str, protocol: str, batch: int | None, data: Path,
            inputs: dict[str, np.ndarray]) -> list[str]:
    """The arguments that say what perf_analyzer sends, and where: the model, the
    server, the protocol, the batch, and the inputs written to the file ``data``."""
    _write_inputs(data, inputs, batched=batch is not None)
    return [str(binary()), "-m", model, "-u", url, "-i", protocol, "-b", str(batch or 1),
            "--input-data", str(data)]


def _write_inputs(path: Path, inputs: dict[str, np.ndarray], batched: bool) -> None:
    """Each input's raw bytes, base64, with its shape, in perf_analyzer's JSON input
    file. A JSON file rather than a folder of raw files: from a folder perf_analyzer
    wants a file for every input, optional ones too (chapter 6's pipelines take
    ``PIXELS`` or ``ENCODED``); from JSON it sends the inputs it is given."""
    request = {}
    for name, array in inputs.items():
        array = np.ascontiguousarray(array)
        one = array[0] if batched else array  # perf_analyzer adds the batch itself
        request[name] = {"b64": base64.b64encode(one.tobytes()).decode("ascii"),
                         "shape": list(one.shape)}
    path.write_text(json.dumps({"data": [request]}))


# What perf_analyzer says when a time window held no answer: with no model version
# given, it finds no version whose statistics moved (DetermineStatsModelVersion in its
# inference_profiler.cc); with one, no request ended inside the window.
EMPTY_WINDOW = ("failed to find the requested model version",
                "No valid requests recorded within time interval")
LONGEST_WINDOW_MS = 60_000


# How often a running perf_analyzer's server is asked whether it is alive, and how many
# unanswered asks in a row mean it is not.
WATCH_S = 5.0
SILENT_ASKS = 3


def _watched(arguments: list[str], triton, timeout: float, what: str):
    """Run perf_analyzer, asking the server every WATCH_S whether it is alive. A server
    that crashed, or hangs in its crash handler, would hold perf_analyzer until
    ``timeout``: after SILENT_ASKS unanswered asks it is stopped and the error carries
    the server's log (an embedded server's)."""
    process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=_environment())
    deadline = time.monotonic() + timeout
    silent = 0
    try:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=WATCH_S)
                return subprocess.CompletedProcess(arguments, process.returncode,
                                                   stdout, stderr)
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise PerfAnalyzerError(f"perf_analyzer ran past {timeout:g} s on {what}")
            silent = 0 if triton.is_live() else silent + 1
            if silent >= SILENT_ASKS:
                raise PerfAnalyzerError(triton._explain(
                    f"the server stopped answering while perf_analyzer measured {what}: "
                    f"its health endpoint did not answer {SILENT_ASKS} times in a row"))
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _failure(triton, done: subprocess.CompletedProcess, what: str) -> PerfAnalyzerError:
    """The error for a perf_analyzer run that failed: ``what``, its last three lines,
    and, when the server no longer answers, the server's log (an embedded server's)."""
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    message = f"{what}: " + "; ".join(said[-3:])
    if not triton.is_live():
        message = triton._explain(message + " (and the server no longer answers)")
    return PerfAnalyzerError(message)


def run(triton, model: str, inputs: dict[str, np.ndarray], *,
        concurrency: Sequence[int] = (), request_rate: Sequence[float] = (),
        protocol: str = "grpc", batch: int | None = None, window_requests: int | None = None,
        window_s: float | None = None, stability: float = 10.0, max_trials: int = 10,
        percentile: int | None = 95, shared_memory: str = "none",
        output_bytes: int | None = None, max_threads: int | None = None,
        attempts: int = 1, timeout: float = 600.0) -> list[Point]:
    """perf_analyzer against ``triton`` at each load level; one ``Point`` per level.

    ``inputs``: the tensors each request carries, as the model takes them; with
    ``batch`` (the model batches: ``max_batch_size > 0``) the first dimension is the
    batch and perf_analyzer sends ``batch`` copies of the first row (``-b``).
    Give ``concurrency`` (closed loop) or ``request_rate`` (requests per second,
    Poisson arrivals, sent asynchronously: an open loop), not both. ``percentile`` is the
    latency that must be stable (None: the mean, steadier under Poisson arrivals,
    where the tail of a short window swings). ``shared_memory="system"``
    passes inputs and outputs through /dev/shm regions (``output_bytes`` per output
    when outputs have a variable shape). ``max_threads``: perf_analyzer's sending
    threads (its default is 4 for request rates; they send asynchronously, each
    request when its arrival is due; a point's ``delayed`` says how many left late). ``window_requests`` (count windows, 50 when neither
    is given) or ``window_s`` (time windows, seconds): the module's docstring says which
    suits which model; a time window that holds no answer is doubled until one does
    (the point's ``command`` shows the window it ran with). ``attempts``: a level that
    does not settle within ``max_trials`` windows is measured again, from the start, up
    to ``attempts`` runs in all; only the last run counts, and its ``Point.attempts`` says how many there were. On a busy
    machine one run in ten may not settle; comparisons that need every run's number
    take each level again rather than lose the comparison.
    """
    if bool(concurrency) == bool(request_rate):
        raise ValueError("give concurrency or request_rate, not both and not neither")
    if protocol not in ("grpc", "http"):
        raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
    if shared_memory not in ("none", "system"):
        raise ValueError(f"shared_memory must be 'none' or 'system', not {shared_memory!r}")
    if window_requests is not None and window_s is not None:
        raise ValueError("give window_requests (count windows) or window_s (time windows), "
                         "not both")
    if window_s is not None and not 0.05 <= window_s <= 60:
        raise ValueError(f"window_s must be between 0.05 and 60 seconds, not {window_s!r}")
    if window_requests is not None and window_requests < 1:
        raise ValueError(f"window_requests must be 1 or more, not {window_requests!r}")
    if attempts < 1:
        raise ValueError(f"attempts must be 1 or more, not {attempts!r}")
    settings = profile.perf_settings(window_s, window_requests, max_trials, stability, attempts)
    window_s, window_requests = settings["window_s"], settings["window_requests"]
    max_trials, stability = settings["max_trials"], settings["stability"]
    attempts = settings["attempts"]
    def windows(window_ms: int) -> list[str]:
        if window_s is None:
            return ["--measurement-mode", "count_windows",
                    "--measurement-request-count", str(window_requests or 50)]
        return ["--measurement-mode", "time_windows",
                "--measurement-interval", str(window_ms)]

    if not binary().exists():
        raise PerfAnalyzerError(f"perf_analyzer is not at {binary()}: run `make venv`")
    mode, levels = (("concurrency", list(concurrency)) if concurrency
                    else ("request rate", list(request_rate)))
    url = triton.grpc_url if protocol == "grpc" else triton.http_url
    points = []
    with tempfile.TemporaryDirectory(prefix="tritonbook_perf_") as folder:
        folder = Path(folder)
        data = folder / "inputs.json"
        # The arguments before the window's and after it.
        head = _target(model, url, protocol, batch, data, inputs)
        tail = ["-s", str(stability), "-r", str(max_trials), "--shared-memory", shared_memory]
        if percentile is not None:  # else perf_analyzer stabilises on the mean latency
            tail += ["--percentile", str(percentile)]
        if output_bytes is not None:
            tail += ["--output-shared-memory-size", str(output_bytes)]
        if max_threads is not None:
            tail += ["--max-threads", str(max_threads)]

        def one_level(level) -> Point:
            report = folder / "level.csv"
            report.unlink(missing_ok=True)
            if mode == "concurrency":
                load = ["--concurrency-range", f"{int(level)}:{int(level)}"]
            else:
                # Asynchronous: each request leaves when its arrival is due, not when
                # a sending thread is free (a late one is "delayed").
                load = ["--request-rate-range", f"{level}:{level}",
                        "--request-distribution", "poisson", "--async"]
            window_ms = round((window_s or 0) * 1000)
            while True:
                before = _totals(triton, model)
                arguments = [*head, *windows(window_ms), *tail, *load]
                done = _watched([*arguments, "-f", str(report)], triton, timeout,
                                f"{model} at {mode} {level}")
                said = done.stdout + done.stderr
                # A time window shorter than an answer can hold none; perf_analyzer then
                # stops and asks for a larger window, which it gets, doubled each time.
                empty = done.returncode != 0 and any(words in said for words in EMPTY_WINDOW)
                if not (empty and window_s is not None and window_ms < LONGEST_WINDOW_MS):
                    break
                window_ms = min(2 * window_ms, LONGEST_WINDOW_MS)
            unstable = "Failed to obtain stable measurement" in said
            if done.returncode != 0 and not unstable:
                raise _failure(triton, done, f"perf_analyzer failed on {model} at {mode} {level}")
            # As a reader re-runs it: the inputs in a file named inputs.json.
            shown = shlex.join(["perf_analyzer", *arguments[1:]]).replace(
                str(data), "inputs.json")
            point = _parse(said, report, model, mode, level, shown)
            after = _totals(triton, model)
            executions = after["executions"] - before["executions"] if after and before else 0
            if point.stable and executions:
                point = dataclasses.replace(
                    point,
                    exec_ms=(after["busy"] - before["busy"]) / executions / 1e6,
                    exec_inferences=(after["inferences"] - before["inferences"]) / executions)
            return point

        for level in levels:
            for attempt in range(1, attempts + 1):
                point = one_level(level)
                if point.stable:
                    break
            points.append(dataclasses.replace(point, attempts=attempt))
    return points


@dataclass(frozen=True)
class RateSearch:
    """perf_analyzer's binary search for the highest request rate whose latency
    percentile meets an objective (``highest_rate``)."""

    model: str
    objective_ms: float
    percentile: int
    # Each rate in the order perf_analyzer measured it, and whether it met the
    # objective (settled, with its percentile within it).
    tried: tuple[tuple[float, bool], ...]
    met: tuple[Point, ...]  # the levels that met it, as measured
    step: float
    command: str

    @property
    def rate(self) -> float:
        """The highest rate that met the objective; NaN when the lowest did not."""
        return max((point.load for point in self.met), default=math.nan)

    def __str__(self) -> str:
        path = ", ".join(f"{rate:g} {'met' if ok else 'missed'}" for rate, ok in self.tried)
        return (f"{self.model}: highest rate with p{self.percentile} within "
                f"{self.objective_ms:g} ms: {self.rate:g}/s, to within {self.step:g}/s "
                f"(rates tried: {path})")


_LEVEL = re.compile(r"^Request Rate: ([\d.]+) inference requests per seconds", re.M)


def highest_rate(triton, model: str, inputs: dict[str, np.ndarray], *, low: float,
                 high: float, step: float, objective_ms: float, percentile: int = 95,
                 protocol: str = "grpc", batch: int | None = None,
                 window_requests: int = 100, stability: float = 20.0, max_trials: int = 6,
                 timeout: float = 1200.0) -> RateSearch:
    """The highest rate of Poisson arrivals, between ``low`` and ``high`` requests per
    second, at which ``model``'s ``percentile`` latency stays within ``objective_ms``:
    perf_analyzer's own search, as its authors intend it for this question
    (``--request-rate-range low:high:step --binary-search --latency-threshold
    --percentile``, requests sent asynchronously).

    perf_analyzer measures ``low`` (if it misses, the search stops: NaN), then ``high``
    (if it meets, that is the answer), then halves the interval between the highest
    rate that met and the lowest that missed until it is ``step`` or less. A rate
    misses when its percentile is over the objective, or when its windows never agree
    within ``stability`` percent in ``max_trials`` windows (a queue that keeps growing
    never settles). Count windows of ``window_requests`` answers: a p95 from three
    windows of 100 rests on 300. The quick profile measures ``low`` and ``high`` only.
    """
    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, not {low!r} and {high!r}")
    if not 0 < step <= high - low:
        raise ValueError(f"step must be above 0 and at most high - low, not {step!r}")
    if percentile not in (50, 90, 95, 99):
        raise ValueError(f"percentile must be 50, 90, 95 or 99, not {percentile!r}")
    if protocol not in ("grpc", "http"):
        raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
    settings = profile.perf_settings(None, window_requests, max_trials, stability, 1)
    step = profile.search_step(low, high, step)
    if not binary().exists():
        raise PerfAnalyzerError(f"perf_analyzer is not at {binary()}: run `make venv`")
    url = triton.grpc_url if protocol == "grpc" else triton.http_url
    with tempfile.TemporaryDirectory(prefix="tritonbook_perf_") as folder:
        folder = Path(folder)
        data = folder / "inputs.json"
        arguments = [
            *_target(model, url, protocol, batch, data, inputs),
            "--measurement-mode", "count_windows",
            "--measurement-request-count", str(settings["window_requests"]),
            "-s", str(settings["stability"]), "-r", str(settings["max_trials"]),
            "--request-rate-range", f"{low:g}:{high:g}:{step:g}", "--binary-search",
            "--latency-threshold", f"{objective_ms:g}", "--percentile", str(percentile),
            "--request-distribution", "poisson", "--async"]
        report = folder / "levels.csv"
        done = _watched([*arguments, "-f", str(report)], triton, timeout,
                        f"{model} (the rate search)")
        said = done.stdout + done.stderr
        shown = shlex.join(["perf_analyzer", *arguments[1:]]).replace(str(data), "inputs.json")
        if done.returncode != 0 and "Failed to obtain stable measurement" not in said:
            raise _failure(triton, done, f"perf_analyzer's search failed on {model}")
        rows = {}
        if report.exists():
            with open(report, newline="") as handle:
                rows = {float(row["Request Rate"]): row for row in csv.DictReader(handle)}
    # The report prints each rate it measures under a heading of its own; a rate that
    # settled has its numbers under it, and a row in the CSV.
    headings = list(_LEVEL.finditer(done.stdout))
    tried, met = [], []
    for index, heading in enumerate(headings):
        rate = float(heading.group(1))
        end = headings[index + 1].start() if index + 1 < len(headings) else len(done.stdout)
        row = rows.get(rate)
        point = (_point(done.stdout[heading.start():end], row, model, "request rate", rate,
                        shown) if row is not None else None)
        ok = row is not None and float(row[f"p{percentile} latency"]) / 1e3 <= objective_ms
        tried.append((rate, bool(ok)))
        if ok:
            met.append(point)
    return RateSearch(model, objective_ms, percentile, tuple(tried), tuple(met), step, shown)


def _totals(triton, model: str) -> dict[str, int] | None:
    """The server's statistics for ``model``, or None where it has none to give (an
    unknown model: perf_analyzer then says what is wrong)."""
    from tritonclient.utils import InferenceServerException

    from tritonbook.loadgen import server_totals

    try:
        return server_totals(triton, model)
    except InferenceServerException:
        return None
    except OSError as error:  # a timeout or a refused connection: the server is gone
        raise PerfAnalyzerError(triton._explain(
            f"the server did not answer for {model}'s statistics ({error!r})")) from None


def capacity(point: Point, instances: int) -> float:
    """The most inferences per second ``instances`` serial instances can deliver at
    the compute time and batch size the server reported for the level: instances x
    inferences per execution / compute time of one execution (``Point.execution_ms``).
    The batch size is the one of the reported windows (perf_analyzer's server-side
    counts), where the throughput was measured: the batcher forms smaller batches
    while a level starts. NaN without the server's statistics."""
    execution_ms = point.execution_ms()
    if not execution_ms > 0:
        return math.nan
    per_execution = (point.inferences / point.executions if point.executions
                     else point.exec_inferences)
    return instances * per_execution / (execution_ms / 1e3)


def table(points: Sequence[Point]):
    """A pandas table, one row per load level."""
    import pandas as pd

    return pd.DataFrame([p.row() for p in points])


def series_table(series: dict[str, Sequence[Point]], instances: int | dict[str, int],
                 names: str = "config"):
    """One table for several series (``{label: points}``), the label as the outer
    index, with a ``utilisation`` column: each level's throughput over what its model's
    serial instances can deliver (``capacity``). ``instances`` is one count for every
    model, or a count per model name."""
    import pandas as pd

    joined = pd.concat({label: table(points) for label, points in series.items()},
                       names=[names])
    count = (lambda model: instances) if isinstance(instances, int) else instances.__getitem__
    joined["utilisation"] = [p.infer_per_s / capacity(p, count(p.model))
                             for points in series.values() for p in points]
    return joined


def layouts_table(layouts: dict[tuple[int, int], Point], cores: int):
    """A thread grid's table: one row per layout, ``{(instances, threads each): point}``,
    with the threads it runs per core and its ``utilisation`` (throughput over what
    that many serial instances can deliver at the compute time the server reported)."""
    import pandas as pd

    rows = [{"instances": count, "threads each": threads,
             "threads / cores": count * threads / cores,
             "stable": point.stable, "requests": point.requests,
             "infer/s": point.infer_per_s, "p50 ms": point.p50,
             "utilisation": point.infer_per_s / capacity(point, count)}
            for (count, threads), point in layouts.items()]
    return pd.DataFrame(rows)


def knee(points: Sequence[Point]) -> str:
    """Where latency turns up along a request-rate sweep, in words.

    A level is over the line when its p95 is more than twice the lowest rate's, or when
    it never settled (a queue that keeps growing does not settle). The knee is the lowest
    rate from which every higher rate is over the line. A level over the line below one
    under it is one noisy level, not a knee: it is named, and the sweep's knee is read
    above it. Where the highest rate is under the line there is no knee in the sweep."""
    if not points:
        raise ValueError("no levels to read a knee from")
    points = sorted(points, key=lambda point: point.load)
    if not points[0].stable:
        return "no knee drawn: the lowest rate never settled"
    base = points[0].p95
    over = [not point.stable or point.p95 > 2 * base for point in points]
    first = len(over)
    while first > 0 and over[first - 1]:
        first -= 1
    noisy = [f"{point.load:g}/s" for point, o in zip(points[:first], over) if o]
    aside = f" ({', '.join(noisy)} over the line, a higher rate under it: noise)" if noisy else ""
    if first == len(points):
        return f"no knee up to {points[-1].load:g} requests/s{aside}"
    at = points[first]
    why = "p95 over twice the lowest rate's" if at.stable else "latency never settled"
    return f"knee at {at.load:g}/s: {why} there and at every higher rate{aside}"


def saturation(points: Sequence[Point], within: float = 0.1) -> tuple[Point, Point]:
    """Along a closed-loop sweep (requests in flight): the settled level with the most
    throughput, the sweep's measured capacity, and the fewest in flight whose throughput
    comes within ``within`` (a fraction) of it. Past that level more requests in flight
    add little throughput and mostly queue: by Little's law the mean latency then grows
    in proportion to what is in flight."""
    settled = sorted((p for p in points if p.stable), key=lambda p: p.load)
    if not settled:
        raise ValueError("no settled level to read a capacity from")
    top = max(settled, key=lambda p: p.infer_per_s)
    first = next(p for p in settled if p.infer_per_s >= (1 - within) * top.infer_per_s)
    return top, first


def plot_settings(table, title: str, tail: str = "p95 ms"):
    """One labelled point per row of a ``table`` (its index names the setting):
    throughput across, a tail latency up, so that the better setting sits lower and
    further right. Rows without that tail (an unsettled level) are left out."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, row in table.dropna(subset=[tail]).iterrows():
        ax.scatter(row["infer/s"], row[tail], s=40)
        ax.annotate(label, (row["infer/s"], row[tail]), textcoords="offset points",
                    xytext=(5, 4), fontsize=8)
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel(f"{tail.split()[0]} latency (ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_latency_throughput(series: dict[str, Sequence[Point]], title: str):
    """Latency percentiles (p50, p95, p99 where the samples allow) against throughput:
    the curve a capacity planner reads, one line per series and percentile."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {50: "-", 95: "--", 99: ":"}
    for index, (label, points) in enumerate(series.items()):
        color = f"C{index}"
        stable = [p for p in points if p.stable]
        for q, style in styles.items():
            xs = [p.infer_per_s for p in stable if not math.isnan(p.tail(q))]
            ys = [p.tail(q) for p in stable if not math.isnan(p.tail(q))]
            if xs:
                ax.plot(xs, ys, style, marker="o", color=color, label=f"{label}, p{q}")
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    else:  # an empty frame would look like a drawing error
        ax.text(0.5, 0.5, "no level settled: nothing to draw", ha="center",
                va="center", transform=ax.transAxes)
    ax.set_title(title)
    fig.tight_layout()
    return fig
