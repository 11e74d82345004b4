"""The book's verdict on "faster / slower": repeated runs, a 95 % interval, a drift
check. The rule is tested on simulated runs whose truth is known."""

import numpy as np
import pytest

from tritonbook.measure import Ratio, interleaved, round_robin


def _verdicts(true_ratio, runs, spread, trials=2000, seed=0):
    rng = np.random.default_rng(seed)
    counts = {}
    for _ in range(trials):
        a = tuple(true_ratio * 100 * (1 + spread * rng.standard_normal(runs)))
        b = tuple(100 * (1 + spread * rng.standard_normal(runs)))
        verdict = Ratio("a / b", a, b).verdict
        key = verdict if verdict in ("higher", "lower", "no difference shown") else "none"
        counts[key] = counts.get(key, 0) + 1
    return {k: v / trials for k, v in counts.items()}


@pytest.mark.parametrize("runs", [3, 5, 7])
def test_no_difference_is_rarely_called_one(runs):
    # Runs that differ only by noise (5 % spread): a 95 % interval calls a
    # difference about 5 % of the time. The quartile-overlap rule the book used
    # before called one 34 % of the time at 3 runs.
    shares = _verdicts(1.0, runs, spread=0.05)
    assert shares.get("higher", 0) + shares.get("lower", 0) < 0.08


def test_a_real_difference_is_found():
    shares = _verdicts(1.3, 5, spread=0.05)
    assert shares.get("higher", 0) > 0.8 and shares.get("lower", 0) == 0


def test_too_few_runs_or_a_drifting_baseline_give_no_verdict():
    assert Ratio("x", (12.0, 12.1), (10.0, 10.1)).verdict == "not enough runs for a verdict"
    drifting = Ratio("x", (12.0, 12.0, 12.0), (10.0, 10.5, 11.5))
    assert drifting.verdict.startswith("the baseline drifted 14%")
    clear = Ratio("x", (12.0, 12.5, 11.8), (10.2, 9.9, 10.1))
    low, high = clear.interval
    assert clear.verdict == "higher" and 1 < low < clear.ratio < high
    assert str(clear).startswith("x: 1.20x (95 % interval 1.11-1.31, 3 + 3 runs")


def test_interleaved_alternates_the_two_measurements():
    calls = []
    ratio = interleaved(lambda: calls.append("a") or 2.0, lambda: calls.append("b") or 1.0,
                        runs=3, label="a / b")
    assert calls == ["a", "b"] * 3
    assert ratio.a == (2.0,) * 3 and ratio.ratio == 2.0 and ratio.verdict == "higher"


def test_an_unstable_run_withholds_the_verdict():
    ratio = Ratio("x", (12.0, float("nan"), 12.1), (10.0, 10.1, 10.0))
    assert ratio.verdict.startswith("a run gave no number")
    assert all(np.isnan(ratio.interval))


def test_a_drift_smaller_than_the_difference_keeps_the_verdict():
    # The baseline drifts 20 %, but A is twice B: no drift made that.
    ratio = Ratio("x", (20.0, 21.0, 22.0), (9.0, 10.0, 11.0))
    assert ratio.drift == pytest.approx(0.2) and ratio.verdict == "higher"


def test_round_robin_shares_one_baseline_run_per_round():
    calls = []
    ratios = round_robin(
        {"a": lambda: calls.append("a") or 2.0, "c": lambda: calls.append("c") or 3.0},
        lambda: calls.append("base") or 1.0, rounds=2, label="{} / base")
    assert calls == ["a", "c", "base", "a", "c", "base"]
    assert [str(r).split(":")[0] for r in ratios.values()] == ["a / base", "c / base"]
    assert ratios["c"].a == (3.0, 3.0) and ratios["c"].b == ratios["a"].b == (1.0, 1.0)


def test_the_plot_against_a_baseline_draws_each_ratio_with_its_interval():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from tritonbook.measure import plot_against_baseline

    ratios = {"fast": Ratio("fast / base", (90.0, 92.0, 91.0), (100.0, 101.0, 99.0)),
              "slow": Ratio("slow / base", (50.0, 49.0, 51.0), (100.0, 101.0, 99.0))}
    latency = pd.DataFrame({"no face": [10.0, 20.0], "one face": [400.0, 800.0]},
                           index=list(ratios))
    fig = plot_against_baseline(latency, ratios, "title", baseline="script")
    left, right = fig.axes
    # One bar per deployment and column, at the latencies given.
    assert sorted(bar.get_height() for bar in left.patches) == [10.0, 20.0, 400.0, 800.0]
    # The ratio markers sit at each Ratio's value; the baseline is a line at 1.
    [markers] = [line for line in right.lines if line.get_marker() == "o"]
    assert np.allclose(markers.get_ydata(), [r.ratio for r in ratios.values()])
    assert [1.0, 1.0] in ([float(y) for y in line.get_ydata()] for line in right.lines)
    assert "script" in right.get_ylabel()
    plt.close(fig)
