"""A small closed-loop load generator on tritonclient that checks every answer.

NVIDIA's own load generator, ``perf_analyzer`` (``tritonbook.perf`` runs it), is what
the book measures load with. This module does what perf_analyzer cannot: it compares
every answer under load with the expected one, so a fast wrong answer cannot pass as a
measurement. ``tests/test_perf.py`` holds the two to each other where the client is not
the bottleneck.

Closed loop, like perf_analyzer's ``--concurrency-range``: ``concurrency`` workers each
send a request, wait for its answer, and send the next, so at most ``concurrency``
requests are in flight. Each request's latency is the client's wall time from sending
to having the output as a NumPy array, serialisation included. Python serialises and
parses more slowly than perf_analyzer's C++: on a model that computes for a fraction of
a millisecond, this client, not the server, sets the pace.

- ``measure`` measures the way perf_analyzer does: windows until three in a row agree
  (see its docstring), the server's own times over the same span, and a check that the
  throughput does not exceed what the model's instances can compute.
- ``run`` sends a fixed number of requests: for checks under load, not for numbers.
- ``burst`` sends a list of requests at once and says how many executions served them:
  for what the batcher merges, not for numbers.

    result = measure(triton, "srcnn", inputs, ["output"], concurrency=4)
    print(result)  # throughput and latency, with how they were measured

The window is 1 s unless a cell names another. The quick profile
(``tritonbook.profile``, CI's) shortens it to 0.1 s and takes the first three windows
after the settling one, agreeing or not: every cell still runs and checks what it
checks, and its numbers carry no conclusion.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tritonbook import profile

__all__ = ["LoadResult", "measure", "run", "sweep", "server_totals",
           "capacity_check", "served_instances", "ImplausibleMeasurement",
           "results_table", "plot_sweeps",
           "executions_by_batch_size", "statistics_table", "burst"]


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
    # measure() only: each window's (infer/s, mean latency), the settling window
    # first; whether the reported three agreed; the server's mean ms per request in
    # each phase over the reported span; the requests per second its instances can
    # answer at the compute time it reported (capacity_check), and how many there are.
    windows: tuple[tuple[float, float], ...] = field(default=(), repr=False)
    stable: bool | None = None
    server: dict[str, float] | None = None
    capacity: float | None = None
    instances: int | None = None

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        """Inferences (rows) per second over the measured span."""
        return self.requests * self.batch / self.wall

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
    def utilisation(self) -> float:
        """Requests per second over what the instances can answer (``capacity``):
        near 1, every instance computed all the time. NaN without a capacity."""
        if not self.capacity:
            return math.nan
        return self.requests / self.wall / self.capacity

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
        if self.capacity is not None:
            row["utilisation"] = self.utilisation
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
    # The clock starts in the barrier's action, which runs before any thread is let go:
    # a worker's first send can never come before it (the main thread, taking the time
    # after its own wait() returned, could be descheduled while workers already send).
    clock: dict[str, float] = {}
    ready = threading.Barrier(concurrency + 1, action=lambda: clock.setdefault("started", time.perf_counter()))
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
        started = clock["started"]
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


SERVER_PHASES = {"queue": "queue", "input": "compute_input", "infer": "compute_infer",
                 "output": "compute_output"}


class ImplausibleMeasurement(AssertionError):
    """A load point served more than its instances can compute: a measurement bug."""


def server_totals(triton, model: str) -> dict[str, int]:
    """The server's cumulative counts for ``model`` (all versions summed), from the
    statistics API: successful requests and their nanoseconds end to end
    (``success``), nanoseconds in each phase (``SERVER_PHASES``), inferences (batch
    rows) and executions of the model, and ``busy``, the nanoseconds the instances
    computed (each execution counted once)."""
    totals = dict.fromkeys(["requests", "success", *SERVER_PHASES, "inferences",
                            "executions", "busy"], 0)
    for entry in triton.http().get_inference_statistics(model)["model_stats"]:
        stats = entry["inference_stats"]
        totals["requests"] += int(stats["success"]["count"])
        totals["success"] += int(stats["success"]["ns"])
        for phase, key in SERVER_PHASES.items():
            totals[phase] += int(stats[key]["ns"])
        totals["inferences"] += int(entry["inference_count"])
        totals["executions"] += int(entry["execution_count"])
        # The instances' busy time: each execution once, whatever it carried (the
        # per-request phases above credit a batch's time to every request in it).
        for row in entry.get("batch_stats", []):
            totals["busy"] += sum(int(row[key]["ns"]) for key in
                                  ("compute_input", "compute_infer", "compute_output"))
    return totals


def served_instances(triton, model: str) -> int | None:
    """How many instances serve ``model``, from the config the server uses; None for
    a model without instances of its own (an ensemble)."""
    config = triton.http().get_model_config(model)
    if config.get("platform") == "ensemble":
        return None
    return sum(int(group.get("count", 1)) for group in config.get("instance_group", [])) or None


def _server_means(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """Mean milliseconds per request in each phase between two ``server_totals``,
    and the rest of the server's time ("overhead": parsing, scheduling, responding)."""
    served = after["requests"] - before["requests"]
    if not served:
        return dict.fromkeys([*SERVER_PHASES, "overhead"], math.nan)
    means = {phase: (after[phase] - before[phase]) / served / 1e6 for phase in SERVER_PHASES}
    total = (after["success"] - before["success"]) / served / 1e6
    means["overhead"] = max(total - sum(means.values()), 0.0)
    return means


def capacity_check(requests: int, span: float, before: dict[str, int],
                   after: dict[str, int], instances: int | None,
                   tolerance: float = 0.10) -> float | None:
    """The most requests per second ``instances`` serial instances can answer, and
    a check that ``requests`` answers in ``span`` seconds did not exceed it.

    One execution takes the server's mean compute time C (input, infer, output, from
    its batch statistics: each execution once) and answers the mean number of
    requests per execution, R. In ``span`` seconds an instance finishes at most
    span / C + 1 executions (the +1: one that began before the span). More answers
    than instances x (span / C + 1) x R, beyond ``tolerance``, cannot have happened:
    ``ImplausibleMeasurement``. Returns instances x R / C, or None without instances
    or server data.
    """
    served = after["requests"] - before["requests"]
    executions = after["executions"] - before["executions"]
    if not instances or not served or not executions:
        return None
    compute = (after["busy"] - before["busy"]) / executions / 1e9
    if compute <= 0:
        return None
    per_execution = served / executions
    most = instances * (span / compute + 1) * per_execution
    if requests > most * (1 + tolerance):
        raise ImplausibleMeasurement(
            f"{requests} answers in {span:.3g} s, but {instances} instance(s) computing "
            f"{compute * 1e3:.3g} ms per execution of {per_execution:.2g} request(s) can "
            f"answer at most {most:.1f}")
    return instances * per_execution / compute


def _window_stats(spans, start: float, end: float, batch: int) -> tuple[int, float, float]:
    """Answers in [start, end) (each request counted once, in the window where its
    answer arrived, as perf_analyzer does), inferences per second, mean latency."""
    latencies = [done - sent for sent, done in spans if start <= done < end]
    if not latencies:
        return 0, 0.0, math.nan
    return len(latencies), len(latencies) * batch / (end - start), statistics.fmean(latencies)


def _agree(values: Sequence[float], tolerance: float) -> bool:
    return min(values) > 0 and max(values) / min(values) <= 1 + tolerance


def _triple_agrees(windows: Sequence[tuple[int, float, float]], tolerance: float,
                   min_requests: int) -> bool:
    """Do these three windows agree in throughput and mean latency within
    ``tolerance`` (max / min), holding ``min_requests`` answers between them?"""
    if len(windows) != 3 or sum(w[0] for w in windows) < min_requests:
        return False
    return all(_agree([w[i] for w in windows], tolerance) for i in (1, 2))


def measure(triton, model: str, inputs: dict[str, np.ndarray], outputs: Sequence[str], *,
            concurrency: int = 1, protocol: str = "grpc", window: float | None = None,
            tolerance: float = 0.10, max_windows: int = 10, min_requests: int | None = None,
            warmup: int = 1, timeout: float = 300.0, expected: dict[str, np.ndarray] | None = None,
            rtol: float = 1e-4, atol: float = 1e-4, batch: int | None = None) -> LoadResult:
    """Measure until three consecutive windows agree, the way perf_analyzer does.

    The clock starts when every worker is warm. The first window holds the moment all
    workers send at once, so it only settles the load and is never reported. Each
    later window lasts at least ``window`` seconds (default 1; the quick profile's 0.1)
    and until it holds a third of ``min_requests`` answers (default 60: 20 a window, so
    that one answer more or less moves a window's throughput by 5 %, not more; as
    perf_analyzer's count windows grow until they hold their count). A request counts once, in the
    window where its answer arrived. After each window the last three are tested:
    throughput and mean latency within ``tolerance`` (max / min). The first three that
    agree are the result; after ``max_windows`` windows in all (a hard limit), the last
    three are, marked unstable. The result holds exactly those three windows: their
    answers, their span, and the server's statistics over the same span (mean ms per
    request in each phase). Where the model has instances, ``capacity_check`` holds the
    answers to what they can compute. Warm-up, answer checks and errors work as in
    ``run``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if max_windows < 4:
        raise ValueError("max_windows must be at least 4: a settling window, then three to compare")
    window, max_windows, min_requests = profile.loadgen_settings(
        window, max_windows, 60 if min_requests is None else int(min_requests))
    per_window = max(1, math.ceil(min_requests / 3))
    if batch is None:
        batch = int(next(iter(inputs.values())).shape[0])
    instances = served_instances(triton, model)

    workers = [_Worker(triton, model, inputs, outputs, protocol, timeout) for _ in range(concurrency)]
    spans: list[tuple[float, float]] = []  # (sent, answered), seconds from the start
    errors: list[BaseException] = []
    lock = threading.Lock()
    origin = [0.0]
    # The clock starts when every worker is warm: the barrier's action runs once, before
    # any thread leaves it.
    ready = threading.Barrier(concurrency + 1, action=lambda: origin.__setitem__(0, time.perf_counter()))
    stop = threading.Event()

    check = _answer_check(model, expected, rtol, atol)

    def loop(worker: _Worker):
        _warm_up(worker, warmup, check, errors, stop)
        ready.wait()
        while not stop.is_set():
            sent = time.perf_counter() - origin[0]
            try:
                answer = worker.send()
                # Read the clock under the lock: a window closed under the same lock
                # then holds every answer that arrived before its end.
                with lock:
                    spans.append((sent, time.perf_counter() - origin[0]))
                check(answer)
            except BaseException as exc:
                errors.append(exc)
                stop.set()
                return

    threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in workers]
    bounds = [0.0]  # window k is [bounds[k], bounds[k + 1])
    # Answers are appended in the order they arrive (the clock is read under the
    # lock), so window k's answers are spans[firsts[k]:firsts[k + 1]].
    firsts = [0]
    totals = []  # the server's totals at each bound
    windows: list[tuple[int, float, float]] = []
    stable = False
    try:
        for t in threads:
            t.start()
        ready.wait()
        totals.append(server_totals(triton, model))
        while not stop.is_set() and len(windows) < max_windows:
            time.sleep(min(window / 4, 0.05))
            with lock:
                now = time.perf_counter() - origin[0]
                held = len(spans) - firsts[-1]
                if now - bounds[-1] < window or held < per_window:
                    continue
                bounds.append(now)
                windows.append(_window_stats(spans[firsts[-1]:], bounds[-2], now, batch))
                firsts.append(len(spans))
            totals.append(server_totals(triton, model))
            # Window 0 settles the load; from window 3 on, test the last three.
            if len(windows) >= 4 and _triple_agrees(windows[-3:], tolerance, min_requests):
                stable = True
                break
        stop.set()
        for t in threads:
            t.join()
    finally:
        stop.set()
        for w in workers:
            w.close()
    if errors:
        raise errors[0]
    if len(windows) < 4:
        raise RuntimeError(f"{model}: the run stopped after {len(windows)} windows")

    start, end = bounds[-4], bounds[-1]
    inside = sorted((done, done - sent) for sent, done in spans if start <= done < end)
    capacity = capacity_check(len(inside), end - start, totals[-4], totals[-1], instances,
                              tolerance)
    return LoadResult(model, protocol, concurrency, batch, tuple(lat for _, lat in inside),
                      end - start, tuple(done - start for done, _ in inside),
                      windows=tuple((w[1], w[2]) for w in windows), stable=stable,
                      server=_server_means(totals[-4], totals[-1]), capacity=capacity,
                      instances=instances)


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


def executions_by_batch_size(triton, model: str, version: str = "", *,
                             rows: int | None = None, timeout: float = 10.0) -> dict[int, int]:
    """How many times the server ran the model at each batch size, from its statistics.

    With ``rows``, waits (up to ``timeout`` seconds) until the executions hold that many
    batch rows in all: a backend reports an execution's statistics as its execute call
    ends, after the responses went out (the python backend's ``PbMetricReporter``,
    ``src/python_be.cc``), so a client that has every answer can read them early."""
    deadline = time.monotonic() + timeout
    while True:
        stats = triton.http().get_inference_statistics(model, version)["model_stats"]
        counts: dict[int, int] = {}
        for entry in stats:
            for row in entry.get("batch_stats", []):
                size = int(row["batch_size"])
                counts[size] = counts.get(size, 0) + int(row["compute_infer"]["count"])
        held = sum(size * count for size, count in counts.items())
        if rows is None or held >= rows or time.monotonic() > deadline:
            return dict(sorted(counts.items()))
        time.sleep(0.05)


def burst(triton, model: str, requests: Sequence[dict[str, np.ndarray]],
          outputs: Sequence[str], *, timeout: float = 10.0) -> tuple[list[dict[str, np.ndarray]], int]:
    """Send every request at once and wait for every answer: gRPC ``async_infer`` calls
    from one thread, each answer handed to a queue by its callback.

    Returns each request's ``outputs`` (arrays by name), in the order sent, and how many
    executions the server counted for them, read from its statistics by batch size once
    they hold every row sent (so no other client may use ``model`` meanwhile). An error
    answer is raised with the server's message.
    """
    import queue

    import tritonclient.grpc as grpcclient

    from tritonbook.client import request_inputs, server_answer

    def totals(rows=None):
        by_size = executions_by_batch_size(triton, model, rows=rows, timeout=timeout)
        return sum(by_size.values()), sum(size * n for size, n in by_size.items())

    runs_before, rows_before = totals()
    answers: queue.Queue = queue.Queue()
    client = triton.grpc()
    for k, inputs in enumerate(requests):
        client.async_infer(model, request_inputs(grpcclient, inputs),
                           callback=lambda result, error, k=k: answers.put((k, result, error)))
    got = {}
    for _ in requests:
        k, result, error = answers.get(timeout=timeout)
        if error is not None:
            raise RuntimeError(f"request {k}: {server_answer(error)}")
        got[k] = {name: result.as_numpy(name) for name in outputs}
    rows = sum(int(next(iter(inputs.values())).shape[0]) for inputs in requests)
    runs_after, _ = totals(rows=rows_before + rows)
    return [got[k] for k in range(len(requests))], runs_after - runs_before


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
