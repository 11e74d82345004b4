"""The book's verdict on "faster / slower": paired rounds in a turning order, a 95 %
interval over the per-round ratios, a practical threshold fixed in advance. The rule is
tested on simulated rounds whose truth is known."""

import numpy as np
import pytest

from tritonbook.measure import Ratio, interleaved, paired_calls, round_robin


def _verdicts(true_ratio, rounds, spread, round_spread=0.0, trials=2000, seed=0):
    """Verdicts on simulated paired rounds: each round's machine speed moves both of its
    measurements by ``round_spread``; each measurement has its own ``spread`` too."""
    rng = np.random.default_rng(seed)
    counts = {}
    for _ in range(trials):
        speed = 1 + round_spread * rng.standard_normal(rounds)
        a = tuple(true_ratio * 100 * speed * (1 + spread * rng.standard_normal(rounds)))
        b = tuple(100 * speed * (1 + spread * rng.standard_normal(rounds)))
        verdict = Ratio("a / b", a, b).verdict
        counts[verdict] = counts.get(verdict, 0) + 1
    return {k: v / trials for k, v in counts.items()}


@pytest.mark.parametrize("rounds", [3, 6, 10])
def test_noise_alone_never_gives_a_direction(rounds):
    # Pairs that differ only by noise (5 % each, 20 % between rounds): the threshold of
    # 10 % keeps a direction out, where a bare 95 % interval calls one 5 % of the time.
    shares = _verdicts(1.0, rounds, spread=0.05, round_spread=0.2)
    assert shares.get("higher", 0) + shares.get("lower", 0) < 0.002


def test_a_real_difference_is_found_through_a_machine_that_moves():
    # 30 % apart, each round on a machine whose speed moves by 20 %: the pairs carry it.
    shares = _verdicts(1.3, 6, spread=0.05, round_spread=0.2)
    assert shares.get("higher", 0) > 0.8 and shares.get("lower", 0) == 0


def test_a_difference_below_the_threshold_is_not_a_direction():
    shares = _verdicts(1.05, 10, spread=0.02)
    assert shares.get("higher", 0) < 0.002
    assert shares.get("the same within 10%", 0) > 0.8


def test_the_verdict_compares_the_whole_interval_with_the_threshold():
    assert Ratio("x", (12.0, 12.1), (10.0, 10.1)).verdict == "not enough rounds for a verdict"
    clear = Ratio("x", (12.0, 12.2, 11.9, 12.1), (10.0, 10.1, 9.9, 10.0))
    low, high = clear.interval
    assert clear.verdict == "higher" and 1.1 < low < clear.ratio < high
    assert str(clear) == ("x: 1.20x (95 % interval 1.20-1.21, 4 paired rounds, "
                          "order alternating): higher")
    # 20 % apart, but three rounds that spread: the interval reaches below 1.1.
    wide = Ratio("x", (12.0, 12.5, 11.8), (10.2, 9.9, 10.1))
    assert wide.interval[0] < 1.1 < wide.ratio and wide.verdict == "not shown beyond 10%"
    same = Ratio("x", (10.1, 10.0, 9.9, 10.0), (10.0, 10.1, 10.0, 9.9))
    assert same.verdict == "the same within 10%"
    # Beyond 1, but not wholly beyond 1.1: no direction.
    short = Ratio("x", (10.8, 11.2, 11.0, 10.9), (10.0, 10.0, 10.0, 10.0))
    assert short.interval[0] > 1 and short.verdict == "not shown beyond 10%"
    lower = Ratio("x", (6.0, 6.2, 5.9), (10.0, 10.2, 9.9), threshold=0.05)
    assert lower.verdict == "lower" and str(lower).endswith(": lower")


def test_a_machine_that_slows_down_cancels_out_of_the_pairs():
    # Each round 20 % slower than the last: A is 1.5 times B in every round.
    speed = [1.0, 1.2, 1.44, 1.73]
    ratio = Ratio("x", tuple(15 * s for s in speed), tuple(10 * s for s in speed))
    assert ratio.ratio == pytest.approx(1.5) and ratio.interval == pytest.approx((1.5, 1.5))
    assert ratio.verdict == "higher"


def test_runs_are_paired_round_by_round():
    with pytest.raises(ValueError, match="pairs them round by round"):
        Ratio("x", (1.0, 2.0, 3.0), (1.0, 2.0))


def test_interleaved_alternates_the_order_of_each_pair():
    calls = []
    ratio = interleaved(lambda: calls.append("a") or 2.0, lambda: calls.append("b") or 1.0,
                        runs=4, label="a / b")
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert ratio.a == (2.0,) * 4 and ratio.ratio == 2.0 and ratio.verdict == "higher"


def test_an_unstable_run_withholds_the_verdict():
    ratio = Ratio("x", (12.0, float("nan"), 12.1), (10.0, 10.1, 10.0))
    assert ratio.verdict.startswith("a run gave no number")
    assert all(np.isnan(ratio.interval))


def test_round_robin_turns_the_order_and_pairs_each_arm_with_its_rounds_baseline():
    calls = []
    value = iter(range(1, 100))

    def run(name):
        return lambda: calls.append(name) or float(next(value))

    ratios = round_robin({"a": run("a"), "c": run("c")}, run("base"), rounds=3,
                         label="{} / base")
    assert calls == ["a", "c", "base", "c", "base", "a", "base", "a", "c"]
    assert [str(r).split(":")[0] for r in ratios.values()] == ["a / base", "c / base"]
    # Values 1..9 in call order: each arm is paired with the baseline of its own round.
    assert ratios["a"].a == (1.0, 6.0, 8.0) and ratios["a"].b == (3.0, 5.0, 7.0)
    assert ratios["c"].a == (2.0, 4.0, 9.0) and ratios["c"].b == ratios["a"].b


def test_paired_calls_time_rounds_of_medians_in_turning_order():
    calls = []
    taken = paired_calls({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                         rounds=2, calls=3, warmup=1)
    assert calls == ["a"] * 4 + ["b"] * 4 + ["b"] * 4 + ["a"] * 4
    assert [t.label for t in taken] == ["a", "b"]
    # Every timed call kept, and one median per round: the samples a Ratio pairs.
    assert all(len(t.seconds) == 6 and len(t.rounds) == 2 and min(t.rounds) > 0 for t in taken)
    assert "6 repeats in 2 rounds" in str(taken[0])


def test_the_order_turns_by_one_place_each_round():
    from tritonbook.measure import turned

    assert [turned("ABC", i) for i in range(4)] == [
        list("ABC"), list("BCA"), list("CAB"), list("ABC")]


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


def test_the_plot_against_a_baseline_survives_a_side_that_never_settled():
    # Chapter 6, 2026-12-07: perf_analyzer's windows never agreed for one deployment, its
    # latencies and ratio were NaN, and the plot raised "Axis limits cannot be NaN".
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from tritonbook.measure import plot_against_baseline

    nan = float("nan")
    ratios = {"settled": Ratio("settled / base", (90.0, 92.0, 91.0), (100.0, 101.0, 99.0)),
              "unsettled": Ratio("unsettled / base", (nan, nan, nan), (100.0, 101.0, 99.0))}
    latency = pd.DataFrame({"one face": [400.0, nan]}, index=list(ratios))
    fig = plot_against_baseline(latency, ratios, "title")
    left, right = fig.axes
    assert left.get_ylim()[1] == 4000.0
    assert "no ratio" in [text.get_text() for text in right.texts]
    plt.close(fig)
