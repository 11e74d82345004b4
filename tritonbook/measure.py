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

__all__ = ["Parity", "parity", "Timing", "time_call", "timing_table", "plot_timings"]


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
    """Call ``fn()`` ``warmup`` times untimed, then ``repeats`` times timed (CUDA work included)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
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


def compare(this: Timing, other: Timing) -> str:
    """One verdict line: the ratio of medians, and whether the quartile ranges overlap.

    The ratio's range runs from this run's lower quartile over the other's upper one to
    the reverse. When the two quartile ranges overlap, the line says the difference is
    inside the spread of this run: no winner, whatever the medians say.
    """
    (a1, a3), (b1, b3) = this.quartiles, other.quartiles
    ratio = this.median / other.median
    line = (f"{this.label} / {other.label}: {ratio:.2f}x the time "
            f"(quartile range {a1 / b3:.2f}-{a3 / b1:.2f})")
    if a1 <= b3 and b1 <= a3:
        return line + ": inside the spread of this run, no clear difference"
    return line + (": faster" if ratio < 1 else ": slower") + ", outside the spread of this run"


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
