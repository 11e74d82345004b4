"""Measuring things the same way in every chapter: parity between two outputs, and timings.

Parity is reported the way ``torch.testing.assert_close`` words a failure (how many
elements exceed the tolerance, the largest difference and where), but as a value a
notebook can print and assert on. Timings are medians with their spread, and the
device, dtype and batch they were taken with, so a printed number says how it was made.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from tritonbook import profile

__all__ = ["Parity", "parity", "Timing", "time_call", "timing_table", "plot_timings",
           "Ratio", "interleaved", "round_robin"]


@dataclass(frozen=True)
class Parity:
    """How far ``actual`` is from ``expected``, element by element."""

    max_abs: float
    index: tuple[int, ...]
    actual_at: float
    expected_at: float
    n_exceeding: int
    numel: int
    rtol: float
    atol: float
    dtype: str

    @property
    def ok(self) -> bool:
        """Every element within ``atol + rtol * |expected|`` (the assert_close rule)."""
        return self.n_exceeding == 0

    def __str__(self) -> str:
        where = ", ".join(map(str, self.index))
        return (f"{self.dtype}: max |difference| {self.max_abs:.3g} at ({where}) "
                f"({self.actual_at:.6g} vs {self.expected_at:.6g}); "
                f"{self.n_exceeding} of {self.numel} elements exceed rtol={self.rtol:g}, atol={self.atol:g}")


def parity(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-5) -> Parity:
    """Compare two tensors of the same shape (computed in float64, on the CPU)."""
    if actual.shape != expected.shape:
        raise ValueError(f"shapes differ: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    diff = (a - e).abs()
    flat = int(diff.argmax()) if diff.numel() else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.dim() else ()
    exceeding = diff > atol + rtol * e.abs()
    return Parity(
        max_abs=float(diff.max()) if diff.numel() else 0.0,
        index=index,
        actual_at=float(a[index]) if diff.numel() else 0.0,
        expected_at=float(e[index]) if diff.numel() else 0.0,
        n_exceeding=int(exceeding.sum()),
        numel=diff.numel(),
        rtol=rtol,
        atol=atol,
        dtype=str(actual.dtype).replace("torch.", ""),
    )


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls of one function."""

    label: str
    seconds: tuple[float, ...] = field(repr=False)
    setting: str = ""  # device, dtype, batch: what the reader needs to read the number

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartile (the spread reported next to the median)."""
        if len(self.seconds) < 2:
            return self.seconds[0], self.seconds[0]
        q = statistics.quantiles(self.seconds, n=4, method="inclusive")
        return q[0], q[2]

    def __str__(self) -> str:
        q1, q3 = self.quartiles
        setting = f", {self.setting}" if self.setting else ""
        return (f"{self.label}: median {self.median * 1e3:.3g} ms "
                f"(IQR {q1 * 1e3:.3g}-{q3 * 1e3:.3g} ms, {len(self.seconds)} repeats{setting})")


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_call(fn: Callable[[], object], label: str, repeats: int = 20, warmup: int = 2,
              setting: str = "") -> Timing:
    """Call ``fn()`` ``warmup`` times untimed, then ``repeats`` times timed (CUDA work
    included); the quick profile (``tritonbook.profile``) makes fewer calls."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    repeats, warmup = profile.repeats(repeats), profile.warmup(warmup)
    for _ in range(warmup):
        fn()
    _synchronize()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _synchronize()
        seconds.append(time.perf_counter() - start)
    return Timing(label, tuple(seconds), setting)


def timing_table(timings: Sequence[Timing], baseline: str | None = None):
    """A pandas table: median, quartiles (ms) and the ratio to ``baseline`` (default: the first)."""
    import pandas as pd

    base = next(t for t in timings if t.label == baseline) if baseline else timings[0]
    rows = []
    for t in timings:
        q1, q3 = t.quartiles
        rows.append({"implementation": t.label, "median ms": t.median * 1e3, "q1 ms": q1 * 1e3,
                     "q3 ms": q3 * 1e3, "repeats": len(t.seconds),
                     f"time / {base.label}": t.median / base.median})
    return pd.DataFrame(rows).set_index("implementation")


def plot_timings(groups: dict[str, Sequence[Timing]], title: str, ylabel: str = "median time (ms)"):
    """Grouped bars of median times with quartile whiskers; one group per dict entry."""
    import matplotlib.pyplot as plt
    import numpy as np

    labels = list(dict.fromkeys(t.label for ts in groups.values() for t in ts))
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs, medians, lows, highs = [], [], [], []
        for g, timings in enumerate(groups.values()):
            for t in timings:
                if t.label == label:
                    q1, q3 = t.quartiles
                    xs.append(g + (i - (len(labels) - 1) / 2) * width)
                    medians.append(t.median * 1e3)
                    lows.append(t.median * 1e3 - q1 * 1e3)
                    highs.append(q3 * 1e3 - t.median * 1e3)
        ax.bar(xs, medians, width, yerr=[lows, highs], capsize=3, label=label)
    ax.set_xticks(np.arange(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_against_baseline(latency, ratios: dict[str, "Ratio"], title: str,
                          baseline: str = "baseline"):
    """Two panels: median latencies per deployment (bars, log scale; one bar per column
    of ``latency``, whose index names the deployments), and each deployment's ratio to
    the baseline with its 95 % interval (``ratios``, keyed like the index)."""
    import matplotlib.pyplot as plt
    import numpy as np

    labels = list(latency.index)
    xs = np.arange(len(labels))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.8 / len(latency.columns)
    for i, column in enumerate(latency.columns):
        offset = (i - (len(latency.columns) - 1) / 2) * width
        # The axis says "median latency, ms": the legend names only what differs.
        name = str(column).removesuffix("median ms").strip(" ,") or str(column)
        left.bar(xs + offset, latency[column], width, label=name)
    left.set_yscale("log")
    left.set_ylim(top=10 * latency.to_numpy().max())  # room for the legend
    left.set_ylabel("median latency, ms (log scale)")
    left.set_title("median latency")
    left.legend(loc="upper left", ncols=len(latency.columns))
    centres = np.array([ratios[label].ratio for label in labels])
    lows = np.array([ratios[label].interval[0] for label in labels])
    highs = np.array([ratios[label].interval[1] for label in labels])
    runs = {f"{len(r.a)} + {len(r.b)} runs" for r in ratios.values()}
    right.errorbar(xs, centres, yerr=[centres - lows, highs - centres], fmt="o",
                   capsize=4, label=f"95 % interval, {', '.join(sorted(runs))}")
    right.axhline(1, color="black", linestyle="--", label=baseline)
    right.set_ylabel(f"throughput, relative to the {baseline}")
    right.set_title(f"throughput against the {baseline}")
    right.set_ylim(0, 1.3)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(xs, labels)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# Student's t, two-sided 95 %: the quantile t(0.975, df) for df = 1..30 (standard
# tables); above 30 the normal quantile, 1.96, is within 4 % of it.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t975(df: float) -> float:
    if df < 1:
        return float("inf")
    return _T975[int(df) - 1] if df < 31 else 1.96


@dataclass(frozen=True)
class Ratio:
    """How a measure of A compares with the same measure of B, from repeated
    independent runs: the ratio of their means and its 95 % interval.

    The interval is Welch's t interval on the logarithms (a ratio is a difference of
    logs; the runs of A and of B may spread differently). ``drift`` is the change
    across B's runs along a fitted line, relative to B's mean: with runs interleaved
    A B A B ..., a machine that slows down or speeds up during the comparison shows
    it there, and the verdict is withheld when that drift is above ``max_drift`` and
    as large as the difference itself.
    """

    label: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    min_runs: int = 3
    max_drift: float = 0.10
    how: str = "interleaved"  # how the runs were taken, for the printed line

    @property
    def ratio(self) -> float:
        return statistics.fmean(self.a) / statistics.fmean(self.b)

    @property
    def interval(self) -> tuple[float, float]:
        import math

        finite = all(math.isfinite(x) and x > 0 for x in (*self.a, *self.b))
        if min(len(self.a), len(self.b)) < 2 or not finite:
            return float("nan"), float("nan")
        la, lb = [math.log(x) for x in self.a], [math.log(x) for x in self.b]
        va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
        se = math.sqrt(va + vb)
        if se == 0:
            return self.ratio, self.ratio
        # Welch-Satterthwaite degrees of freedom.
        df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
        centre = statistics.fmean(la) - statistics.fmean(lb)
        half = _t975(df) * se
        return math.exp(centre - half), math.exp(centre + half)

    @property
    def drift(self) -> float:
        """The change across B's runs that a straight line through them shows, over
        B's mean (a trend, not one stray run)."""
        n = len(self.b)
        if n < 2:
            return 0.0
        centre = (n - 1) / 2
        slope = sum((i - centre) * (y - statistics.fmean(self.b)) for i, y in enumerate(self.b))
        slope /= sum((i - centre) ** 2 for i in range(n))
        return abs(slope * (n - 1)) / statistics.fmean(self.b)

    @property
    def verdict(self) -> str:
        import math

        if not all(math.isfinite(x) and x > 0 for x in (*self.a, *self.b)):
            return "a run gave no number (unstable): no verdict"
        if min(len(self.a), len(self.b)) < self.min_runs:
            return "not enough runs for a verdict"
        # A drift smaller than the difference cannot have made it.
        if self.drift > self.max_drift and self.drift >= abs(self.ratio - 1):
            return f"the baseline drifted {self.drift:.0%} during the runs: no verdict"
        low, high = self.interval
        if low > 1:
            return "higher"
        if high < 1:
            return "lower"
        return "no difference shown"

    def __str__(self) -> str:
        low, high = self.interval
        return (f"{self.label}: {self.ratio:.2f}x (95 % interval {low:.2f}-{high:.2f}, "
                f"{len(self.a)} + {len(self.b)} runs, {self.how}): {self.verdict}")


def interleaved(run_a: Callable[[], float], run_b: Callable[[], float], runs: int = 3,
                label: str = "A / B") -> Ratio:
    """Call ``run_a`` and ``run_b`` alternately, ``runs`` times each (A B A B ...),
    each call returning one independent measurement, and compare them (``Ratio``)."""
    return round_robin({label: run_a}, run_b, rounds=runs, label="{}")[label]


def round_robin(runs: dict[str, Callable[[], float]], baseline: Callable[[], float],
                rounds: int = 3, label: str = "{} / baseline") -> dict[str, Ratio]:
    """Several measurements against one baseline: each round calls every function of
    ``runs`` in turn, then ``baseline`` (A B C base, A B C base, ...). Each ``Ratio``
    compares one of ``runs`` with the baseline's runs, which all of them share;
    ``label`` is formatted with the name. The quick profile (``tritonbook.profile``)
    takes fewer rounds."""
    rounds = profile.rounds(rounds)
    taken: dict[str, list[float]] = {name: [] for name in runs}
    base: list[float] = []
    for _ in range(rounds):
        for name, run in runs.items():
            taken[name].append(float(run()))
        base.append(float(baseline()))
    return {name: Ratio(label.format(name), tuple(values), tuple(base))
            for name, values in taken.items()}
