"""A small closed-loop load generator built on tritonclient: the book's perf_analyzer.

Triton's own load generator, ``perf_analyzer``, is a C++ program that is not on PyPI
(the ``perf-analyzer`` package there is an empty placeholder). It ships in the SDK
container, ``nvcr.io/nvidia/tritonserver:<YY.MM>-py3-sdk``; ``perf_analyzer_command``
writes the command that measures what ``sweep`` measures.

Closed loop, like perf_analyzer's ``--concurrency-range``: ``concurrency`` workers each
send a request, wait for its answer, and send the next, so at most ``concurrency``
requests are in flight. Each request's latency is the client's wall time from sending
to having the output as a NumPy array, serialisation included.

    result = run(triton, "gfpgan_batched", {"input__0": face}, ["output__0"], concurrency=4)
    print(result)  # throughput and latency, with how they were measured
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["LoadResult", "run", "sweep", "compare_throughput", "results_table", "plot_sweeps", "perf_analyzer_command",
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

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        """Inferences (rows) per second over the whole run."""
        return self.requests * self.batch / self.wall

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

    @property
    def quartiles(self) -> tuple[float, float]:
        return self.percentile(25), self.percentile(75)

    def __str__(self) -> str:
        q1, q3 = self.quartiles
        return (f"{self.model} over {self.protocol}, concurrency {self.concurrency}, batch {self.batch}: "
                f"{self.throughput:.3g} infer/s; latency median {self.median * 1e3:.4g} ms "
                f"(IQR {q1 * 1e3:.4g}-{q3 * 1e3:.4g} ms, p90 {self.percentile(90) * 1e3:.4g} ms, "
                f"{self.requests} requests in {self.wall:.3g} s)")

    def row(self) -> dict:
        q1, q3 = self.quartiles
        return {"model": self.model, "protocol": self.protocol, "concurrency": self.concurrency,
                "batch": self.batch, "requests": self.requests, "infer/s": self.throughput,
                "median ms": self.median * 1e3, "q1 ms": q1 * 1e3, "q3 ms": q3 * 1e3,
                "p90 ms": self.percentile(90) * 1e3}


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

    def check(answer):
        for name, want in (expected or {}).items():
            np.testing.assert_allclose(answer[name], want, rtol=rtol, atol=atol,
                                       err_msg=f"{model} output {name} under load")

    def loop(worker: _Worker):
        try:
            for _ in range(warmup):
                check(worker.send())
        except BaseException as exc:
            errors.append(exc)
            stop.set()
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
          concurrencies: Sequence[int], *, requests_per_worker: int = 4, min_requests: int = 8,
          progress: bool = True, **kwargs) -> list[LoadResult]:
    """``run`` at each concurrency: ``requests_per_worker`` timed requests per worker,
    and at least ``min_requests`` per run, so that low concurrencies get a median too."""
    from tqdm import tqdm

    results = []
    for c in tqdm(concurrencies, desc=f"{model} concurrency", disable=not progress, leave=False):
        results.append(run(triton, model, inputs, outputs, concurrency=c,
                           requests=max(requests_per_worker * c, min_requests), **kwargs))
    return results


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
