"""How much work each measurement does: the ``full`` profile, or the ``quick`` one.

The book's committed outputs come from ``full`` runs (``make book``): every window,
round and repeat a chapter asks for, and every measurement standard of the book. CI,
and a reader in a hurry, set ``TRITONBOOK_PROFILE=quick``: each measurement then runs
its code path once with the least work that exercises it, and every check of an
answer, of a physical bound and of a result's form still runs. A quick run's numbers
carry no conclusion, and no cell asserts a measured direction in either profile (the
prose is held to the committed full run's verdicts instead, by the unit tests).

The profile changes parameters only, and only here: the measuring functions of
``measure``, ``loadgen``, ``perf`` and ``navigator.optimization_profile`` pass what a
cell asks for through ``current()``, and a cell that loops over its own runs asks
``rounds(n)`` for their number. No cell reads the profile's name
(``tests/test_profile.py``).

    from tritonbook.profile import rounds
    for _ in range(rounds(4)):  # 4 in the full profile, 1 in the quick one
        ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Profile", "PROFILES", "VARIABLE", "current", "rounds", "repeats", "warmup",
           "loadgen_settings", "memory_requests", "reloads", "perf_settings", "search_step",
           "analyzer_instances"]

VARIABLE = "TRITONBOOK_PROFILE"


@dataclass(frozen=True)
class Profile:
    """Caps on the work a measurement does. ``None``: what the cell asks for."""

    name: str
    # Runs of a comparison (rounds of interleaved or round-robin runs, a cell's own
    # loop of runs): at most this many. The quick profile's one run gives no interval
    # and so no verdict ("not enough runs"): its line is printed all the same.
    rounds: int | None
    # Timed calls of ``measure.time_call``, and its untimed warm-up calls.
    repeats: int | None
    warmup: int | None
    # ``loadgen.measure``: the window (seconds) where a cell names none, the longest
    # window, the windows in all (a settling one, then three: the quick profile takes
    # the first three as they come, and says whether they agreed), and the answers
    # the three must hold.
    window_s: float
    longest_window_s: float | None
    max_windows: int | None
    min_requests: int | None
    # ``perf.run``: time windows no longer than this (seconds), count windows of at
    # most this many answers, windows per level, stability (percent) at least this
    # wide, runs of a level that did not settle.
    perf_window_s: float | None
    perf_window_requests: int | None
    perf_max_trials: int | None
    perf_stability: float | None
    perf_attempts: int | None
    # ``perf.highest_rate``: measure only the two ends of the searched range.
    search_ends_only: bool
    # Model Navigator's profiling: samples per timing window (its default is 25).
    navigator_window_size: int | None
    # Model Analyzer's grid (``analyzer.search``): the first this many of the instance
    # counts a cell asks for. Each config is a server start and a model load of its
    # own, most of a quick search's time; one count still measures every batcher
    # setting the cell compares.
    analyzer_instance_counts: int | None = None
    # Inductor settings for AOTInductor packages (``tritonbook.aoti``), as (name, value)
    # pairs. The quick profile's scalar kernels (cpp.simdlen 1) built at -O0
    # (aot_inductor.debug_compile) compute the same answers, slower, and compile GFPGAN
    # in about 60 s instead of 110 s on two cores: Inductor's vectorisation analysis and
    # the optimiser are most of a compile.
    aoti_options: tuple = ()
    # A model file whose build is a cell's lesson (``repository.build_shown``): rebuilt
    # and timed every time, or only when its code or inputs changed since its last
    # build (CI's second notebook pass then reuses the first's files).
    rebuild_shown_builds: bool = True
    # Chapter 12 (``tritonbook.memory``): the requests of a memory test, and the
    # unload-and-load cycles of a reload test, at most this many.
    memory_requests: int | None = None
    reloads: int | None = None


PROFILES = {
    "full": Profile(
        name="full", rounds=None, repeats=None, warmup=None,
        window_s=1.0, longest_window_s=None, max_windows=None, min_requests=None,
        perf_window_s=None, perf_window_requests=None, perf_max_trials=None,
        perf_stability=None, perf_attempts=None, search_ends_only=False,
        navigator_window_size=None),
    "quick": Profile(
        name="quick", rounds=1, repeats=3, warmup=1,
        # Four windows of at least 0.1 s, one answer each at least: a GFPGAN level
        # in about two seconds.
        window_s=0.1, longest_window_s=0.1, max_windows=4, min_requests=3,
        # perf_analyzer checks stability over its last three windows: three short
        # ones, and a threshold that any three meet (1000 %).
        perf_window_s=0.25, perf_window_requests=6, perf_max_trials=3,
        perf_stability=1000.0, perf_attempts=1, search_ends_only=True,
        navigator_window_size=3, analyzer_instance_counts=1,
        aoti_options=(("cpp.simdlen", 1), ("aot_inductor.debug_compile", True)),
        rebuild_shown_builds=False, memory_requests=24, reloads=4),
}


def current() -> Profile:
    """The profile ``TRITONBOOK_PROFILE`` names (``full`` when it is unset)."""
    name = os.environ.get(VARIABLE, "full").strip() or "full"
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"{VARIABLE} must be one of {sorted(PROFILES)}, not {name!r}") from None


def _capped(asked, cap):
    return asked if cap is None or asked is None else min(asked, cap)


def rounds(asked: int) -> int:
    """How many runs of a comparison to take, where a cell asks for ``asked``."""
    return _capped(asked, current().rounds)


def repeats(asked: int) -> int:
    """How many timed calls to make, where a cell asks for ``asked``."""
    return _capped(asked, current().repeats)


def memory_requests(asked: int) -> int:
    """How many requests a memory test sends, where a cell asks for ``asked``."""
    return _capped(asked, current().memory_requests)


def reloads(asked: int) -> int:
    """How many unload-and-load cycles a reload test runs, where a cell asks for ``asked``."""
    return _capped(asked, current().reloads)


def warmup(asked: int) -> int:
    return _capped(asked, current().warmup)


def loadgen_settings(window: float | None, max_windows: int, min_requests: int,
                     ) -> tuple[float, int, int]:
    """``loadgen.measure``'s window, windows in all, and answers."""
    profile = current()
    window = _capped(profile.window_s if window is None else window, profile.longest_window_s)
    return (window, _capped(max_windows, profile.max_windows),
            _capped(min_requests, profile.min_requests))


def search_step(low: float, high: float, step: float) -> float:
    """``perf.highest_rate``'s precision: what a cell asks for, or the whole range
    (its two ends only) in the quick profile."""
    return high - low if current().search_ends_only else step


def perf_settings(window_s: float | None, window_requests: int | None, max_trials: int,
                  stability: float, attempts: int) -> dict:
    """``perf.run``'s windows, trials, stability and attempts under this profile."""
    profile = current()
    stability = stability if profile.perf_stability is None else max(stability,
                                                                      profile.perf_stability)
    if window_s is None:
        window_requests = _capped(window_requests or 50, profile.perf_window_requests)
    return {"window_s": _capped(window_s, profile.perf_window_s),
            "window_requests": window_requests,
            "max_trials": _capped(max_trials, profile.perf_max_trials),
            "stability": stability,
            "attempts": _capped(attempts, profile.perf_attempts)}


def analyzer_instances(asked: tuple[int, ...]) -> tuple[int, ...]:
    """The instance counts of a Model Analyzer search: what a cell asks for, or the
    first of them in the quick profile."""
    cap = current().analyzer_instance_counts
    return tuple(asked) if cap is None else tuple(asked)[:cap]
