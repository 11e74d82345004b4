"""A small closed-loop load generator built on tritonclient: the book's perf_analyzer.

Triton's own load generator, ``perf_analyzer``, is a C++ program that is not on PyPI
(the ``perf-analyzer`` package there is an empty placeholder). It ships in the SDK
container, ``nvcr.io/nvidia/tritonserver:<YY.MM>-py3-sdk``; ``perf_analyzer_command``
writes the command that measures what ``sweep`` measures.

Closed loop, like perf_analyzer's ``--concurrency-range``: ``concurrency`` workers each
send a request, wait for its answer, and send the next, so at most ``concurrency``
requests are in flight. Each request's latency is the client's wall time from sending
to having the output as a NumPy array, serialisation included.

Two ways to decide how long to measure:

- ``measure`` works the way perf_analyzer does: it cuts time into windows and reports
  once the last three windows agree (max / min of throughput and of mean latency within
  ``tolerance``, perf_analyzer's default 10 %), or marks the result unstable after
  ``max_windows``. It also reads the server's own times (queue, compute) for the run.
- ``run`` sends a fixed number of requests: for checks under load, not for numbers.

    result = measure(triton, "gfpgan_batched", {"input__0": face}, ["output__0"], concurrency=4)
    print(result)  # throughput and latency, with how they were measured

The window length comes from the environment variable ``TRITONBOOK_WINDOW_S`` (seconds,
default 1.0). CI sets it shorter: every cell still runs and checks what it checks, and
its numbers are noisier.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["LoadResult", "measure", "run", "sweep", "window_seconds", "server_totals",
           "compare_throughput", "results_table", "plot_sweeps", "perf_analyzer_command",
           "executions_by_batch_size", "statistics_table"]


@dataclass(frozen=True)
class LoadResult:
    """One closed-loop run: every request's latency and the run's wall time."""

    model: str
    protocol: str
    concurrency: int
    batch: int  # images (rows) per request
    latencies: tuple[float, ...] = field(repr=False)  # seconds, in completion order
    wall: float  # seconds from the first send to the last answer
    # When each answer arrived, in seconds from the first send, in completion order.
    completions: tuple[float, ...] = field(default=(), repr=False)
    # measure() only: requests done in the measured span, counting a request that
    # straddles its edge by the fraction of it inside; each window's (infer/s, mean
    # latency); whether the last three agreed; the server's mean ms per request.
    work: float | None = None
    windows: tuple[tuple[float, float], ...] = field(default=(), repr=False)
    stable: bool | None = None
    server: dict[str, float] | None = None

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        """Inferences (rows) per second over the measured span."""
        done = self.requests if self.work is None else self.work
        return done * self.batch / self.wall

    @property
    def throughput_range(self) -> tuple[float, float]:
        """This run's spread of throughput, from the spread of its latencies.

        In a closed loop ``concurrency`` requests are always in flight, so throughput
        goes as one over latency (Little's law). The range applies the latencies'
        relative spread to the measured throughput: from ``throughput * median / q3`` to
        ``throughput * median / q1``.
        """
        q1, q3 = self.quartiles
        return self.throughput * self.median / q3, self.throughput * self.median / q1

    @property
    def median(self) -> float:
        return statistics.median(self.latencies)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q))

    def tail(self, q: float) -> float:
        """The ``q`` percentile, or NaN when too few samples lie beyond it to mean
        anything: at least five, so a p95 needs 100 requests and a p99 500."""
        if self.requests * (100 - q) / 100 < 5:
            return math.nan
        return self.percentile(q)

    @property
    def how(self) -> str:
        """How long it was measured: the window count and whether they agreed."""
        if self.stable is None:
            return f"{self.requests} requests in {self.wall:.3g} s"
        verdict = "stable" if self.stable else "UNSTABLE"
        return f"{verdict} after {len(self.windows)} windows, {self.requests} requests in the last 3"

    @property
    def quartiles(self) -> tuple[float, float]:
        return self.percentile(25), self.percentile(75)

    def __str__(self) -> str:
        q1, q3 = self.quartiles
        p95 = self.tail(95)
        tail = f", p95 {p95 * 1e3:.4g} ms" if p95 == p95 else ""
        return (f"{self.model} over {self.protocol}, concurrency {self.concurrency}, batch {self.batch}: "
                f"{self.throughput:.3g} infer/s; latency median {self.median * 1e3:.4g} ms "
                f"(IQR {q1 * 1e3:.4g}-{q3 * 1e3:.4g} ms{tail}; {self.how})")

    def row(self) -> dict:
        """One table row. p95 and p99 are NaN without enough samples (``tail``)."""
        q1, q3 = self.quartiles
        row = {"model": self.model, "protocol": self.protocol, "concurrency": self.concurrency,
               "batch": self.batch, "requests": self.requests, "infer/s": self.throughput,
               "median ms": self.median * 1e3, "q1 ms": q1 * 1e3, "q3 ms": q3 * 1e3,
               "p95 ms": self.tail(95) * 1e3, "p99 ms": self.tail(99) * 1e3}
        if self.stable is not None:
            row.update(windows=len(self.windows), stable=self.stable)
        if self.server is not None:
            row.update({f"server {phase} ms": ms for phase, ms in self.server.items()})
        return row


class _Worker:
    """One client and one prepared request, reused for every request this worker sends."""

    def __init__(self, triton, model, inputs, outputs, protocol, timeout):
        from tritonbook.client import request_inputs

        if protocol == "http":
            import tritonclient.http as module

            # A client of its own: the HTTP client must not be shared between threads.
            self.client = module.InferenceServerClient(
                triton.http_url, connection_timeout=timeout, network_timeout=timeout)
            self.extra = {}
        elif protocol == "grpc":
            import tritonclient.grpc as module

            self.client = module.InferenceServerClient(triton.grpc_url)
            self.extra = {"client_timeout": timeout}
        else:
            raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
        self.model = model
        self.inputs = request_inputs(module, inputs)
        self.outputs = [module.InferRequestedOutput(name) for name in outputs]
        self.output_names = list(outputs)

    def send(self) -> dict[str, np.ndarray]:
        result = self.client.infer(self.model, self.inputs, outputs=self.outputs, **self.extra)
        return {name: result.as_numpy(name) for name in self.output_names}

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # closing is best effort; the run's result is what matters
            pass


def _answer_check(model, expected, rtol, atol):
    """A function that compares an answer with ``expected`` (nothing to compare: no-op)."""
    def check(answer):
        for name, want in (expected or {}).items():
            np.testing.assert_allclose(answer[name], want, rtol=rtol, atol=atol,
                                       err_msg=f"{model} output {name} under load")
    return check


def _warm_up(worker, warmup, check, errors, stop) -> None:
    """``warmup`` untimed, checked requests; the first error stops every worker."""
    try:
        for _ in range(warmup):
            check(worker.send())
    except BaseException as exc:
        errors.append(exc)
        stop.set()


def run(triton, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str], *,
        concurrency: int = 1, requests: int | None = None, protocol: str = "grpc",
        warmup: int = 1, timeout: float = 300.0, expected: dict[str, np.ndarray] | None = None,
        rtol: float = 1e-4, atol: float = 1e-4, batch: int | None = None) -> LoadResult:
    """Send ``requests`` requests (default: 4 per worker) with ``concurrency`` in flight.

    Every worker first sends ``warmup`` untimed requests. With ``expected``, every
    answer is compared with it (``np.testing.assert_allclose``), so a fast wrong
    answer cannot pass as a measurement. The first error stops all workers and is
    raised here; a request that takes longer than ``timeout`` seconds is an error.
    ``batch`` is how many inferences one request counts for in the throughput: by
    default the first dimension of the first input (right for ``max_batch_size > 0``;
    pass 1 for a model that takes one image of any shape).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    total = 4 * concurrency if requests is None else requests
    if total < concurrency:
        raise ValueError(f"{total} requests cannot keep {concurrency} workers busy")
    if batch is None:
        batch = int(next(iter(inputs.values())).shape[0])

    workers = [_Worker(triton, model, inputs, outputs, protocol, timeout) for _ in range(concurrency)]
    latencies: list[float] = []
    finished: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    remaining = [total]
    ready = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    check = _answer_check(model, expected, rtol, atol)

    def loop(worker: _Worker):
        _warm_up(worker, warmup, check, errors, stop)
        ready.wait()  # everyone warm: the timed part starts together
        while not stop.is_set():
            with lock:
                if remaining[0] == 0:
                    return
                remaining[0] -= 1
            start = time.perf_counter()
            try:
                answer = worker.send()
                elapsed = time.perf_counter() - start
                check(answer)
            except BaseException as exc:
                errors.append(exc)
                stop.set()
                return
            with lock:
                latencies.append(elapsed)
                finished.append(start + elapsed)

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in workers]
    try:
        for t in threads:
            t.start()
        ready.wait()
        started = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
    finally:
        stop.set()
        for w in workers:
            w.close()
    if errors:
        raise errors[0]
    return LoadResult(model, protocol, concurrency, batch, tuple(latencies), wall,
                      tuple(t - started for t in finished))


def window_seconds() -> float:
    """The measurement window of ``measure``: ``TRITONBOOK_WINDOW_S`` seconds, or 1.0."""
    value = os.environ.get("TRITONBOOK_WINDOW_S", "1.0")
    try:
        window = float(value)
    except ValueError:
        raise ValueError(f"TRITONBOOK_WINDOW_S must be a number of seconds, not {value!r}") from None
    if not 0 < window <= 60:
        raise ValueError(f"TRITONBOOK_WINDOW_S must be between 0 and 60 seconds, not {value!r}")
    return window


SERVER_PHASES = {"queue": "queue", "input": "compute_input", "infer": "compute_infer",
                 "output": "compute_output"}


def server_totals(triton, model: str) -> dict[str, int]:
    """The server's count of successful requests and its nanoseconds in each phase
    (``SERVER_PHASES``), from the statistics API, all versions summed."""
    totals = dict.fromkeys(["requests", *SERVER_PHASES], 0)
    for entry in triton.http().get_inference_statistics(model)["model_stats"]:
        stats = entry["inference_stats"]
        totals["requests"] += int(stats["success"]["count"])
        for phase, key in SERVER_PHASES.items():
            totals[phase] += int(stats[key]["ns"])
    return totals


def _work(spans, start: float, end: float) -> tuple[float, float]:
    """Requests done in [start, end), a request counted by the fraction of its time
    inside, and their latency-weighted sum: smooth even when a window holds one request."""
    work = weighted = 0.0
    for sent, done in spans:
        if done < start or sent >= end:
            continue
        took = done - sent
        part = (min(done, end) - max(sent, start)) / took if took > 0 else float(start <= done < end)
        work += part
        weighted += part * took
    return work, weighted


def _agree(values: Sequence[float], tolerance: float) -> bool:
    return min(values) > 0 and max(values) / min(values) <= 1 + tolerance


def measure(triton, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str], *,
            concurrency: int = 1, protocol: str = "grpc", window: float | None = None,
            tolerance: float = 0.10, max_windows: int = 10, min_requests: int | None = None,
            warmup: int = 1, timeout: float = 300.0, expected: dict[str, np.ndarray] | None = None,
            rtol: float = 1e-4, atol: float = 1e-4, batch: int | None = None) -> LoadResult:
    """Measure until the last three windows agree, the way perf_analyzer does.

    Time is cut into windows of ``window`` seconds (default ``window_seconds()``). A
    window's throughput counts each request by the fraction of its time inside the
    window, and its latency is the mean of those requests, weighted the same way. The
    run stops when the last three windows agree within ``tolerance`` (max / min, for
    throughput and for latency) and hold ``min_requests`` answers, or after
    ``max_windows`` windows, marked unstable. The result covers the last three windows,
    or as many more as it takes to hold ``min_requests`` answers (default 8, or 4 with
    windows shorter than half a second, CI's setting). ``server`` is the
    server's mean milliseconds per request in each phase over the whole run, from its
    statistics. Warm-up, answer checks and errors work as in ``run``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if max_windows < 3:
        raise ValueError("max_windows must be at least 3: stability needs three windows")
    window = window_seconds() if window is None else float(window)
    if min_requests is None:
        min_requests = 8 if window >= 0.5 else 4
    if batch is None:
        batch = int(next(iter(inputs.values())).shape[0])

    workers = [_Worker(triton, model, inputs, outputs, protocol, timeout) for _ in range(concurrency)]
    in_flight: list[float | None] = [None] * concurrency  # when each worker's request was sent
    spans: list[tuple[float, float]] = []  # (sent, answered), seconds from the start
    errors: list[BaseException] = []
    lock = threading.Lock()
    origin = [0.0]
    # The clock starts when every worker is warm: the barrier's action runs once, before
    # any thread leaves it.
    ready = threading.Barrier(concurrency + 1, action=lambda: origin.__setitem__(0, time.perf_counter()))
    stop = threading.Event()

    check = _answer_check(model, expected, rtol, atol)

    def loop(index: int, worker: _Worker):
        _warm_up(worker, warmup, check, errors, stop)
        ready.wait()
        while not stop.is_set():
            with lock:
                in_flight[index] = sent = time.perf_counter() - origin[0]
            try:
                answer = worker.send()
                done = time.perf_counter() - origin[0]
                check(answer)
            except BaseException as exc:
                errors.append(exc)
                stop.set()
                return
            with lock:
                spans.append((sent, done))
                in_flight[index] = None

    def answered(first: int, last: int) -> int:
        return sum(first * window <= done < last * window for _, done in spans)

    threads = [threading.Thread(target=loop, args=(i, w), daemon=True) for i, w in enumerate(workers)]
    windows: list[tuple[float, float]] = []
    stable, first = False, 0
    try:
        for t in threads:
            t.start()
        ready.wait()
        before = server_totals(triton, model)
        while not stop.is_set():
            time.sleep(min(window / 4, 0.05))
            with lock:
                now = time.perf_counter() - origin[0]
                # Every request sent before the oldest one still in flight has its answer,
                # so the windows before that moment will not change any more.
                settled = min((s for s in in_flight if s is not None), default=now)
                snapshot = list(spans)
            while (len(windows) + 1) * window <= settled:
                k = len(windows)
                work, weighted = _work(snapshot, k * window, (k + 1) * window)
                windows.append((work * batch / window, weighted / work if work else math.nan))
            if len(windows) < 3:
                continue
            last = len(windows)
            stable = all(_agree([w[i] for w in windows[-3:]], tolerance) for i in (0, 1))
            first = next((f for f in range(last - 3, -1, -1)
                          if answered(f, last) >= min_requests), None)
            if first is not None and (stable or last >= max_windows):
                break
        stop.set()
        for t in threads:
            t.join()
        after = server_totals(triton, model) if not errors else None
    finally:
        stop.set()
        for w in workers:
            w.close()
    if errors:
        raise errors[0]

    start, end = first * window, len(windows) * window
    inside = sorted((done, done - sent) for sent, done in spans if start <= done < end)
    work, _ = _work(spans, start, end)
    served = after["requests"] - before["requests"]
    server = {phase: (after[phase] - before[phase]) / served / 1e6 if served else math.nan
              for phase in SERVER_PHASES}
    return LoadResult(model, protocol, concurrency, batch, tuple(lat for _, lat in inside), end - start,
                      tuple(done - start for done, _ in inside), work=work, windows=tuple(windows),
                      stable=stable, server=server)


def compare_throughput(this: LoadResult, other: LoadResult) -> str:
    """One verdict line: the ratio of throughputs, and whether it is outside the spread.

    Each run's spread is its ``throughput_range``; the ratio's range runs from this run's
    low end over the other's high end to the reverse. When the two ranges overlap, the
    line says the difference is inside the spread of these runs.
    """
    (a_low, a_high), (b_low, b_high) = this.throughput_range, other.throughput_range
    ratio = this.throughput / other.throughput
    line = f"{ratio:.2f}x (range {a_low / b_high:.2f}-{a_high / b_low:.2f})"
    if a_low <= b_high and b_low <= a_high:
        return line + ", inside the spread of these runs"
    return line + ", outside the spread of these runs"


def sweep(triton, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str],
          concurrencies: Sequence[int], *, progress: bool = True, **kwargs) -> list[LoadResult]:
    """``measure`` at each concurrency (keyword arguments go to ``measure``)."""
    from tqdm import tqdm

    return [measure(triton, model, inputs, outputs, concurrency=c, **kwargs)
            for c in tqdm(concurrencies, desc=f"{model} concurrency", disable=not progress)]


def results_table(results: Sequence[LoadResult]):
    """A pandas table, one row per run."""
    import pandas as pd

    return pd.DataFrame([r.row() for r in results])


def plot_sweeps(series: dict[str, Sequence[LoadResult]], title: str):
    """Throughput (left) and latency median with quartiles (right) against concurrency."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, results in series.items():
        xs = [r.concurrency for r in results]
        left.plot(xs, [r.throughput for r in results], marker="o", label=label)
        medians = np.array([r.median for r in results]) * 1e3
        q1 = np.array([r.quartiles[0] for r in results]) * 1e3
        q3 = np.array([r.quartiles[1] for r in results]) * 1e3
        right.errorbar(xs, medians, yerr=[medians - q1, q3 - medians], marker="o", capsize=3, label=label)
    for ax in (left, right):
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r.concurrency for rs in series.values() for r in rs}))
        ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    left.set_ylabel("throughput (inferences/s)")
    right.set_ylabel("latency per request (ms), median and IQR")
    left.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def executions_by_batch_size(triton, model: str, version: str = "") -> dict[int, int]:
    """How many times the server ran the model at each batch size, from its statistics."""
    stats = triton.http().get_inference_statistics(model, version)["model_stats"]
    counts: dict[int, int] = {}
    for entry in stats:
        for row in entry.get("batch_stats", []):
            size = int(row["batch_size"])
            counts[size] = counts.get(size, 0) + int(row["compute_infer"]["count"])
    return dict(sorted(counts.items()))


def statistics_table(triton, models: Sequence[str]):
    """The server's statistics for ``models``: counts, and mean milliseconds per request
    spent queued and in each compute phase (input copy, inference, output copy).

    ``requests`` is the count of successful requests; ``inferences`` is the server's
    ``inference_count``, one per batch element (image), so a request of three images adds
    three; ``executions`` counts runs of the model."""
    import pandas as pd

    rows = []
    for model in models:
        for entry in triton.http().get_inference_statistics(model)["model_stats"]:
            stats = entry["inference_stats"]
            row = {"model": model, "version": entry["version"],
                   "requests": int(stats["success"]["count"]),
                   "inferences": int(entry["inference_count"]),
                   "executions": int(entry["execution_count"]),
                   "failed": int(stats["fail"]["count"])}
            for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
                count = int(stats[phase]["count"])
                row[f"{phase} ms"] = int(stats[phase]["ns"]) / count / 1e6 if count else float("nan")
            rows.append(row)
    return pd.DataFrame(rows)


def perf_analyzer_command(model: str, inputs: dict[str, np.ndarray], concurrencies: Sequence[int],
                          protocol: str = "grpc", url: str = "127.0.0.1:8001",
                          batched: bool = True) -> str:
    """The perf_analyzer command line for the measurement ``sweep`` makes.

    ``batched``: the model's ``max_batch_size`` is above 0, so the first dimension of
    each input is the batch (``-b``) and ``--shape`` gives the rest.
    """
    steps = sorted(set(concurrencies))
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    # perf_analyzer steps linearly: evenly spaced values keep their step; any other
    # list (1, 2, 4, 8) becomes every value from the lowest to the highest.
    step = gaps.pop() if len(gaps) == 1 else 1
    low, high = steps[0], steps[-1]
    parts = ["perf_analyzer", f"-m {model}", f"-u {url}", f"-i {protocol}"]
    for name, array in inputs.items():
        shape = array.shape[1:] if batched else array.shape
        parts.append(f"--shape {name}:{','.join(map(str, shape))}")
    if batched:
        parts.append(f"-b {next(iter(inputs.values())).shape[0]}")
    parts.append(f"--concurrency-range {low}:{high}:{step}")
    parts.append("--measurement-mode count_windows --measurement-request-count 50")
    return " \\\n    ".join(parts)
