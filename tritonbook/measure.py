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
           "Ratio", "interleaved", "round_robin", "paired_calls", "turned"]


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
    # From ``paired_calls``: the median of each round's calls, the samples a ``Ratio``
    # pairs; the calls inside a round are not independent runs.
    rounds: tuple[float, ...] = field(default=(), repr=False)

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
        rounds = f" in {len(self.rounds)} rounds" if self.rounds else ""
        return (f"{self.label}: median {self.median * 1e3:.3g} ms "
                f"(IQR {q1 * 1e3:.3g}-{q3 * 1e3:.3g} ms, {len(self.seconds)} repeats{rounds}{setting})")


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
    # A level whose windows never agreed has no numbers (NaN): no bar, and no limit.
    measured = latency.to_numpy(dtype=float)
    measured = measured[np.isfinite(measured)]
    if measured.size:
        left.set_ylim(top=10 * measured.max())  # room for the legend
    left.set_ylabel("median latency, ms (log scale)")
    left.set_title("median latency")
    left.legend(loc="upper left", ncols=len(latency.columns))
    centres = np.array([ratios[label].ratio for label in labels])
    lows = np.array([ratios[label].interval[0] for label in labels])
    highs = np.array([ratios[label].interval[1] for label in labels])
    runs = {f"{len(r.a)} paired rounds" for r in ratios.values()}
    right.errorbar(xs, centres, yerr=[centres - lows, highs - centres], fmt="o",
                   capsize=4, label=f"95 % interval, {', '.join(sorted(runs))}")
    for x, centre in zip(xs, centres):
        if not np.isfinite(centre):  # a side without a settled run
            right.annotate("no ratio", (x, 0.05), ha="center", fontsize=8)
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


# The practical threshold X: a difference of less than 10 % is not worth a claim on
# this book's machines, whose speed moves by more than that between sessions. Fixed
# before any data (issue 54); a direction is stated only when the whole 95 % interval
# lies beyond it.
THRESHOLD = 0.10


@dataclass(frozen=True)
class Ratio:
    """How a measure of A compares with the same measure of B, from paired rounds.

    Each round measured A and B once, one right after the other, in an order that
    alternates from round to round (``round_robin``): ``a[i]`` and ``b[i]`` are round
    ``i``'s pair. A machine that slows down during the rounds slows both members of a
    pair, so the analysis is over the per-round ratios ``a[i] / b[i]``: ``ratio`` is
    their geometric mean, ``interval`` Student's t interval of their logarithms (n - 1
    degrees of freedom). Runs taken one after another inside a round are not rounds.

    The verdict compares the whole interval with ``threshold`` (X, fixed in advance):
    "higher" or "lower" when it lies beyond +X or -X, "the same within X" when it lies
    inside both, and "not shown beyond X" when it reaches past one of them.
    """

    label: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    threshold: float = THRESHOLD
    min_rounds: int = 3
    how: str = "order alternating"  # how the rounds were taken, for the printed line

    def __post_init__(self):
        if len(self.a) != len(self.b):
            raise ValueError(f"{self.label}: {len(self.a)} runs of A against {len(self.b)} of B;"
                             " a Ratio pairs them round by round")

    @property
    def valid(self) -> bool:
        import math

        return all(math.isfinite(x) and x > 0 for x in (*self.a, *self.b))

    @property
    def ratios(self) -> tuple[float, ...]:
        """Each round's A / B."""
        return tuple(x / y for x, y in zip(self.a, self.b))

    @property
    def ratio(self) -> float:
        import math

        if not self.valid or not self.a:
            return float("nan")
        return math.exp(statistics.fmean(math.log(r) for r in self.ratios))

    @property
    def interval(self) -> tuple[float, float]:
        import math

        n = len(self.a)
        if n < 2 or not self.valid:
            return float("nan"), float("nan")
        logs = [math.log(r) for r in self.ratios]
        half = _t975(n - 1) * statistics.stdev(logs) / math.sqrt(n)
        centre = statistics.fmean(logs)
        return math.exp(centre - half), math.exp(centre + half)

    @property
    def verdict(self) -> str:
        if not self.valid:
            return "a run gave no number (unstable): no verdict"
        if len(self.a) < self.min_rounds:
            return "not enough rounds for a verdict"
        low, high = self.interval
        x = self.threshold
        if low > 1 + x:
            return "higher"
        if high < 1 - x:
            return "lower"
        if low >= 1 - x and high <= 1 + x:
            return f"the same within {x:.0%}"
        return f"not shown beyond {x:.0%}"

    def __str__(self) -> str:
        low, high = self.interval
        return (f"{self.label}: {self.ratio:.2f}x (95 % interval {low:.2f}-{high:.2f}, "
                f"{len(self.a)} paired rounds, {self.how}): {self.verdict}")


def interleaved(run_a: Callable[[], float], run_b: Callable[[], float], runs: int = 3,
                label: str = "A / B") -> Ratio:
    """Call ``run_a`` and ``run_b`` in ``runs`` paired rounds, A B, then B A, and so on,
    each call returning one measurement, and compare them (``Ratio``)."""
    return round_robin({label: run_a}, run_b, rounds=runs, label="{}")[label]


def round_robin(runs: dict[str, Callable[[], float]], baseline: Callable[[], float],
                rounds: int = 3, label: str = "{} / baseline") -> dict[str, Ratio]:
    """Several measurements against one baseline, in paired rounds: each round calls
    every function of ``runs`` and ``baseline`` once, and the order turns by one place
    from round to round (A B base, B base A, base A B, ...), so that over the rounds each
    function takes each place equally often. Each ``Ratio`` pairs one of ``runs`` with
    the baseline's call of the same round; ``label`` is formatted with the name. The
    quick profile (``tritonbook.profile``) takes fewer rounds."""
    rounds = profile.rounds(rounds)
    order = [*runs, None]  # None: the baseline
    taken: dict[str | None, list[float]] = {name: [] for name in order}
    for index in range(rounds):
        for name in turned(order, index):
            taken[name].append(float((baseline if name is None else runs[name])()))
    base = tuple(taken.pop(None))
    return {name: Ratio(label.format(name), tuple(values), base)
            for name, values in taken.items()}


def turned(names, index: int) -> list:
    """``names`` in the order of round ``index``: turned by one place each round (A B C,
    B C A, C A B, ...), so that over the rounds each takes each place equally often and a
    machine that drifts during a round does not always favour the same one."""
    names = list(names)
    turn = index % len(names) if names else 0
    return names[turn:] + names[:turn]


def paired_calls(functions: dict[str, Callable[[], object]], rounds: int = 6,
                 calls: int = 5, warmup: int = 1, setting: str = "",
                 desc: str | None = None) -> list[Timing]:
    """Time each of ``functions`` in paired rounds: in each round every function makes
    ``warmup`` untimed calls, then ``calls`` timed ones, in the order of ``turned``.
    One ``Timing`` per function, in the dict's order: ``seconds`` holds every timed
    call (for medians and quartiles), ``rounds`` each round's median (the samples a
    ``Ratio`` pairs, round by round). ``desc`` shows a progress bar over the rounds.
    The quick profile takes fewer rounds and calls."""
    rounds = profile.rounds(rounds)
    calls, warmup = profile.repeats(calls), profile.warmup(warmup)
    taken: dict[str, list[float]] = {name: [] for name in functions}
    medians: dict[str, list[float]] = {name: [] for name in functions}
    steps = range(rounds)
    if desc is not None:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc=desc, unit="round")
    for index in steps:
        for name in turned(functions, index):
            for _ in range(warmup):
                functions[name]()
            _synchronize()
            seconds = []
            for _ in range(calls):
                started = time.perf_counter()
                functions[name]()
                _synchronize()
                seconds.append(time.perf_counter() - started)
            taken[name] += seconds
            medians[name].append(statistics.median(seconds))
    return [Timing(name, tuple(taken[name]), setting, tuple(medians[name]))
            for name in functions]
