"""perf_analyzer, run by tritonbook.perf, against a real embedded server, and the
book's own load generator held to it."""

import contextlib
import dataclasses

import numpy as np
import pytest
from conftest import PACE_MS, PACED_CONFIG, PACED_MODEL, write_model

from booktools.leftovers import unmapped_after
from tritonbook import capacity, loadgen, perf, production

# They measure load: a test beside them on the same two cores would move their numbers.
pytestmark = pytest.mark.serial

X = np.arange(4, dtype=np.float32).reshape(1, 4)
CEILING = 1000 / PACE_MS  # executions per second one paced instance can finish
# A test that needs a level to settle takes it again when it does not, as the notebooks
# do (perf.run's attempts): a busy machine leaves one level in ten unsettled, and a
# test fails on a second or third in a row only if the level truly swings.
SETTLE_ATTEMPTS = 3


def test_perf_analyzer_is_installed():
    assert perf.binary().exists(), "make venv installs it"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_paced_model_measures_as_physics_allows(paced_server, protocol):
    points = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[1, 4],
                      protocol=protocol, window_s=0.5, attempts=SETTLE_ATTEMPTS)
    one, four = points
    assert one.stable and four.stable
    for point in points:
        # Physics, not this machine's speed: an execution never takes less than the
        # pace (the stub's overhead on a busy machine may add to it); three windows of
        # 0.5 s hold at least half of what the pace allows; the throughput is never
        # above what one instance computes, and not far below it.
        assert PACE_MS * 0.98 <= point.compute_infer <= PACE_MS * 1.6
        assert point.requests >= 3 * 0.5 * CEILING / 2
        capacity = perf.capacity(point, instances=1)
        assert capacity <= CEILING * 1.02
        assert 0.6 * capacity < point.infer_per_s <= capacity * 1.05
        assert point.executions == point.inferences  # no batcher: one request each
        assert point.server_requests == point.executions
    # Four in flight on one instance: each waits for the three ahead of it.
    assert four.infer_per_s > 0.8 * perf.capacity(four, instances=1)
    assert four.p50 == pytest.approx(4 * one.p50, rel=0.3)
    assert four.queue == pytest.approx(3 * four.compute_infer, rel=0.25)
    assert one.queue < 0.2 * PACE_MS
    # Little's law: requests in flight = throughput x mean time in the system.
    for point in points:
        assert point.load == pytest.approx(point.infer_per_s * point.mean / 1e3, rel=0.1)
    assert "perf_analyzer -m paced" in one.command and f"-i {protocol}" in one.command
    table = perf.table(points)
    assert list(table["concurrency"]) == [1, 4]
    assert {"p50 ms", "p95 ms", "server queue ms", "server overhead ms"} <= set(table)


def test_loadgen_agrees_with_perf_analyzer_where_the_client_is_not_the_bottleneck(
        paced_server):
    # 20 ms per request. At one in flight every cycle holds the client's own work on top
    # of the server's, and the python client does more per request than perf_analyzer:
    # the project's CI measured 0.93 of perf_analyzer's throughput there (2026-12-06),
    # this machine 0.97 to 0.99. With four in flight that work overlaps the server's, and
    # the two agree within 5 % (0.99 to 1.00 here): the GPU record's throughputs still
    # come from loadgen.
    for concurrency, within in ((1, 0.10), (4, 0.05)):
        # Time windows of 0.5 s (25 answers or more each): a count window never lasts
        # under a second.
        tool, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1,
                         concurrency=[concurrency], window_s=0.5,
                         attempts=SETTLE_ATTEMPTS)
        ours = loadgen.measure(paced_server, "paced", {"INPUT__0": X}, ["OUTPUT__0"],
                               concurrency=concurrency, window=0.2,
                               expected={"OUTPUT__0": X})
        assert ours.stable and tool.stable
        assert ours.throughput == pytest.approx(tool.infer_per_s, rel=within), concurrency


def test_a_batched_level_sends_the_batch_asked_for(paced_server):
    rows = np.arange(16, dtype=np.float32).reshape(4, 4)
    point, = perf.run(paced_server, "paced", {"INPUT__0": rows}, batch=4,
                      concurrency=[1], window_s=0.5, attempts=SETTLE_ATTEMPTS)
    assert point.stable
    assert point.inferences == 4 * point.server_requests == 4 * point.executions


# Two optional inputs, as chapter 6's pipelines take PIXELS or ENCODED: perf_analyzer
# must send the one it is given and leave the other out.
EITHER_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "PIXELS", data_type: TYPE_UINT8, dims: [ -1, -1, 3 ], optional: true },
  { name: "ENCODED", data_type: TYPE_STRING, dims: [ 1 ], optional: true }
]
output [ { name: "SHAPE", data_type: TYPE_INT64, dims: [ 3 ] } ]
"""
EITHER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            pixels = pb_utils.get_input_tensor_by_name(request, "PIXELS")
            encoded = pb_utils.get_input_tensor_by_name(request, "ENCODED")
            if pixels is None or encoded is not None:
                error = pb_utils.TritonError("send PIXELS alone")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            if pixels.as_numpy().shape != (48, 64, 3):
                error = pb_utils.TritonError("not the test's picture")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            shape = np.array(pixels.as_numpy().shape, dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SHAPE", shape)]))
        return responses
"""


def test_an_optional_input_left_out_is_not_sent(scratch_repository, scratch_server):
    write_model(scratch_repository, "either", EITHER_CONFIG, {"1/model.py": EITHER_MODEL})
    scratch_server.load("either")
    try:
        picture = np.zeros((48, 64, 3), dtype=np.uint8)
        # What is sent matters here, not how steady it is: a wide stability.
        point, = perf.run(scratch_server, "either", {"PIXELS": picture},
                          concurrency=[1], window_s=0.25, stability=50,
                          attempts=SETTLE_ATTEMPTS)
        # The model refuses any other picture, and perf_analyzer stops on an error.
        with pytest.raises(perf.PerfAnalyzerError, match="not the test's picture"):
            perf.run(scratch_server, "either", {"PIXELS": picture[:8]},
                     concurrency=[1], window_s=0.25)
    finally:
        scratch_server.unload("either")
    # The inputs' shapes travel in the JSON file beside their bytes.
    assert point.stable and point.requests > 0
    assert "--input-data inputs.json" in point.command and "--shape" not in point.command


def test_time_windows_last_as_long_as_asked_and_measure_the_same(paced_server):
    # 0.5 s windows (perf_analyzer waits 0.6 s) at 1000 / PACE_MS answers a second:
    # three agreeing windows hold about 3 x 0.6 x CEILING answers, a count window
    # never less than a second's worth.
    point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[1],
                      window_s=0.5, attempts=SETTLE_ATTEMPTS)
    assert point.stable and "--measurement-mode time_windows" in point.command
    assert "--measurement-interval 500" in point.command
    assert point.requests == pytest.approx(3 * 0.6 * point.infer_per_s, rel=0.25)
    capacity = perf.capacity(point, instances=1)
    assert 0.6 * capacity < point.infer_per_s <= capacity * 1.05 and capacity <= CEILING * 1.02
    counted, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[1],
                        window_requests=5)
    assert "--measurement-mode count_windows" in counted.command
    # Three windows of at least 1 s each, at the rate the level measured (a busy
    # machine serves the paced model a little under its ceiling).
    assert counted.requests >= 3 * 0.9 * counted.infer_per_s


def test_request_rate_runs_with_poisson_arrivals(paced_server):
    # Offered 60 % of what the instance can do: all of it is served, and requests
    # queue now and then, which closed-loop runs at concurrency 1 never show.
    point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1,
                      request_rate=[0.6 * CEILING],
                      window_requests=60, stability=40, percentile=None,
                      attempts=SETTLE_ATTEMPTS)
    assert point.stable and point.mode == "request rate"
    assert point.infer_per_s == pytest.approx(0.6 * CEILING, rel=0.25)
    assert point.queue > 0.05 * PACE_MS and "--request-distribution poisson" in point.command
    assert "delayed %" in point.row()


def test_system_shared_memory_leaves_nothing_behind(paced_server):
    before = set(production.shm_segments(""))
    point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[2],
                      shared_memory="system", window_requests=20,
                      attempts=SETTLE_ATTEMPTS)
    assert point.stable and point.infer_per_s <= perf.capacity(point, 1) * 1.05
    assert paced_server.http().get_system_shared_memory_status() == []
    # What a test running beside this one has in use is mapped; what it has just
    # finished with is gone within moments: neither counts.
    assert unmapped_after(set(production.shm_segments("")) - before) == []


def test_an_unstable_level_says_so_instead_of_a_number(paced_server):
    # Windows of 0.05 s (two or three answers each) cannot agree within 0 %:
    # perf_analyzer gives up.
    point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[1],
                      window_s=0.05, stability=0, max_trials=4)
    assert not point.stable and np.isnan(point.infer_per_s) and point.requests == 0
    assert point.attempts == 1
    # Taken again while it does not settle: twice here, and it still says so.
    point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[1],
                      window_s=0.05, stability=0, max_trials=4, attempts=2)
    assert not point.stable and point.attempts == 2


@contextlib.contextmanager
def paced_at(server, repository, name: str, pace_ms: int):
    """A second paced model, ``pace_ms`` an execution, loaded for the block's length."""
    config = PACED_CONFIG.replace(f'"{PACE_MS}"', f'"{pace_ms}"')
    write_model(repository, name, config, {"1/model.py": PACED_MODEL})
    server.load(name)
    try:
        yield name
    finally:
        server.unload(name)


def test_a_level_that_settles_is_measured_once(paced_server):
    point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[1],
                      window_s=0.25, stability=50, attempts=3)
    assert point.stable and point.attempts == 1


def test_a_time_window_shorter_than_an_answer_grows_until_it_holds_answers(
        paced_server, scratch_repository):
    # 300 ms an execution, windows of 50 ms asked (perf_analyzer waits 60 ms): most
    # windows would hold no answer, and perf_analyzer would stop on the first such.
    with paced_at(paced_server, scratch_repository, "paced_slow", 300) as slow:
        point, = perf.run(paced_server, slow, {"INPUT__0": X}, batch=1,
                          concurrency=[1], window_s=0.05, stability=1000, max_trials=3)
    window_ms = int(point.command.split("--measurement-interval ")[1].split()[0])
    assert point.stable and window_ms in (100, 200, 400, 800, 1600)
    assert point.requests >= 3 and point.infer_per_s <= 1000 / 300 * 1.05


def test_the_highest_rate_within_an_objective_is_perf_analyzers_search_and_obeys_the_queue(
        paced_server, scratch_repository):
    # A model paced at 5 ms (ceiling 200/s), so that a window of 100 answers lasts many
    # times as long as the queue takes to forget its past, even near the ceiling: a p95
    # from windows shorter than that misses the queue's long excursions and comes out
    # low. A p95 of 20 ms (four executions) under Poisson arrivals.
    with paced_at(paced_server, scratch_repository, "paced_fast", 5) as fast:
        search = perf.highest_rate(paced_server, fast, {"INPUT__0": X}, batch=1,
                                   low=60, high=190, step=40, objective_ms=20,
                                   window_requests=100, stability=100, max_trials=4)
    assert "--binary-search" in search.command and "--async" in search.command
    assert "--latency-threshold 20 --percentile 95" in search.command
    rates = [rate for rate, _ in search.tried]
    # perf_analyzer's order: the low end, the high end, then halves of the interval
    # between the highest rate that met and the lowest that missed.
    assert rates[:2] == [60, 190] or rates == [60]
    assert search.tried[0][1], "60/s (utilisation 0.3) missed a 20 ms p95"
    assert not search.tried[1][1], "190/s (utilisation 0.95) met a 20 ms p95"
    missed_above = min(rate for rate, ok in search.tried if not ok and rate > search.rate)
    assert missed_above - search.rate <= 40
    for point in search.met:
        assert point.p95 <= 20 and point.infer_per_s <= 200 * 1.05
    # A fixed service time queues least (Pollaczek-Khinchine): a real one, with its
    # jitter and the client's time on top, meets the objective at no higher a rate than
    # the queue model of its measured execution time says.
    top = max(search.met, key=lambda point: point.load)
    assert search.rate <= 1.1 * capacity.highest_rate(top.execution_ms() / 1e3, 0.020)


def test_bad_runs_are_clear_errors(paced_server):
    with pytest.raises(perf.PerfAnalyzerError, match="failed on no_such_model"):
        perf.run(paced_server, "no_such_model", {"INPUT__0": X}, concurrency=[1])
    with pytest.raises(ValueError, match="not both"):
        perf.run(paced_server, "paced", {"INPUT__0": X}, concurrency=[1], request_rate=[5])
    with pytest.raises(ValueError, match="window_requests .* or window_s"):
        perf.run(paced_server, "paced", {"INPUT__0": X}, concurrency=[1],
                 window_requests=50, window_s=1.0)
    with pytest.raises(ValueError, match="window_s must be between"):
        perf.run(paced_server, "paced", {"INPUT__0": X}, concurrency=[1], window_s=0)
    with pytest.raises(ValueError, match="window_requests must be 1 or more"):
        perf.run(paced_server, "paced", {"INPUT__0": X}, concurrency=[1], window_requests=0)
    with pytest.raises(ValueError, match="attempts must be 1 or more"):
        perf.run(paced_server, "paced", {"INPUT__0": X}, concurrency=[1], attempts=0)
    with pytest.raises(ValueError, match="protocol"):
        perf.run(paced_server, "paced", {"INPUT__0": X}, concurrency=[1], protocol="udp")
    with pytest.raises(ValueError, match="low < high"):
        perf.highest_rate(paced_server, "paced", {"INPUT__0": X}, low=10, high=5, step=1,
                          objective_ms=60)
    with pytest.raises(ValueError, match="step"):
        perf.highest_rate(paced_server, "paced", {"INPUT__0": X}, low=5, high=10, step=6,
                          objective_ms=60)
    with pytest.raises(ValueError, match="percentile"):
        perf.highest_rate(paced_server, "paced", {"INPUT__0": X}, low=5, high=10, step=1,
                          objective_ms=60, percentile=97)


def test_capacity_counts_batches():
    # Executions of 10 ms carrying 2 inferences each, on 2 instances: 2 x 2 / 0.01.
    point = perf.Point("m", "concurrency", 8, True, exec_ms=10.0, exec_inferences=2.0)
    assert perf.capacity(point, instances=2) == pytest.approx(400)
    assert np.isnan(perf.capacity(perf.Point("m", "concurrency", 8, False), 1))
    # The reported windows' own batch size wins over the whole level's.
    windows = perf.Point("m", "concurrency", 8, True, executions=10, inferences=40,
                         exec_ms=10.0, exec_inferences=2.0)
    assert perf.capacity(windows, instances=1) == pytest.approx(400)


def test_series_table_joins_the_series_with_their_utilisation():
    def level(model, infer_per_s):  # one request per 10 ms execution: 100/s each
        return perf.Point(model, "concurrency", 1, True, infer_per_s=infer_per_s,
                          executions=10, inferences=10, server_requests=10, compute_input=0.0,
                          compute_infer=10.0, compute_output=0.0, queue=1.0, overhead=0.5)
    series = {"one": [level("a", 50.0)], "two": [level("b", 150.0), level("b", 100.0)]}
    joined = perf.series_table(series, {"a": 1, "b": 2}, names="model")
    assert list(joined.index.get_level_values("model")) == ["one", "two", "two"]
    assert list(joined["utilisation"]) == pytest.approx([0.5, 0.75, 0.5])
    assert list(perf.series_table(series, 1)["utilisation"]) == pytest.approx([0.5, 1.5, 1.0])
    assert level("a", 1.0).server_ms() == pytest.approx(11.5)


def test_layouts_table_counts_threads_per_core_and_each_layouts_utilisation():
    def level(infer_per_s):  # one request per 10 ms execution: 100/s an instance
        return perf.Point("m", "concurrency", 4, True, infer_per_s=infer_per_s, p50=40.0,
                          executions=10, inferences=10, server_requests=10, compute_input=0.0,
                          compute_infer=10.0, compute_output=0.0)
    unsettled = perf.Point("m", "concurrency", 4, False)
    table = perf.layouts_table({(1, 2): level(90.0), (2, 1): level(150.0), (4, 2): unsettled},
                               cores=2)
    assert list(table["threads / cores"]) == [1.0, 1.0, 4.0]
    assert list(table["utilisation"][:2]) == pytest.approx([0.9, 0.75])
    assert list(table["stable"]) == [True, True, False] and np.isnan(table["infer/s"][2])
    assert list(table.columns[:3]) == ["instances", "threads each", "threads / cores"]


def test_the_knee_is_the_lowest_rate_from_which_every_higher_rate_is_over_the_line():
    def level(rate, p95, stable=True):
        return perf.Point("m", "request rate", rate, stable, p95=p95)
    assert perf.knee([level(100, 2.0), level(200, 3.0), level(300, 5.0)]) == (
        "knee at 300/s: p95 over twice the lowest rate's there and at every higher rate")
    assert perf.knee([level(100, 2.0), level(200, 3.0)]) == "no knee up to 200 requests/s"
    # A queue that grows never settles: that is over the line too.
    assert perf.knee([level(100, 2.0), level(200, 3.0, False), level(300, 9.0, False)]) == (
        "knee at 200/s: latency never settled there and at every higher rate")
    # One noisy level below a level under the line is named, and not taken for the knee.
    assert perf.knee([level(100, 2.0), level(200, 5.0), level(300, 3.0),
                      level(400, 6.0)]) == (
        "knee at 400/s: p95 over twice the lowest rate's there and at every higher rate"
        " (200/s over the line, a higher rate under it: noise)")
    assert perf.knee([level(100, 2.0), level(200, 3.0, False), level(300, 3.0)]) == (
        "no knee up to 300 requests/s (200/s over the line, a higher rate under it: noise)")
    # Read in order of rate, whatever order the levels come in.
    assert perf.knee([level(300, 5.0), level(100, 2.0)]).startswith("knee at 300/s")
    assert perf.knee([level(100, 2.0, False)]).startswith("no knee drawn: the lowest")
    with pytest.raises(ValueError):
        perf.knee([])


def test_plot_settings_draws_one_labelled_point_per_setting_that_has_the_tail():
    import pandas as pd

    table = pd.DataFrame({"infer/s": [100.0, 150.0, 90.0], "p95 ms": [8.0, 6.0, float("nan")]},
                         index=["no batcher", "delay 2 ms", "unsettled"])
    fig = perf.plot_settings(table, "settings")
    [ax] = fig.axes
    points = [tuple(c.get_offsets()[0]) for c in ax.collections]
    assert points == [(100.0, 8.0), (150.0, 6.0)]
    assert [t.get_text() for t in ax.texts] == ["no batcher", "delay 2 ms"]
    assert ax.get_ylabel() == "p95 latency (ms)"


def test_the_curve_says_so_when_no_level_settled():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settled = perf.Point("m", "request rate", 100, True, requests=400, infer_per_s=99.0,
                         p50=1.0, p95=2.0, p99=3.0)
    unsettled = perf.Point("m", "request rate", 200, False)
    drawn = perf.plot_latency_throughput({"a": [settled, unsettled]}, "t")
    assert drawn.axes[0].get_legend() is not None and not drawn.axes[0].texts
    empty = perf.plot_latency_throughput({"a": [unsettled], "b": [unsettled]}, "t")
    assert empty.axes[0].get_legend() is None
    assert [t.get_text() for t in empty.axes[0].texts] == ["no level settled: nothing to draw"]
    plt.close("all")


def test_capacity_of_an_unbatched_level_uses_its_reported_windows():
    # One request per execution in the windows: their own compute (2 + 16 + 2 ms),
    # not the whole run's 25 ms, which a slow start can inflate.
    point = perf.Point("m", "concurrency", 4, True, executions=30, inferences=30,
                       server_requests=30, compute_input=2.0, compute_infer=16.0,
                       compute_output=2.0, exec_ms=25.0, exec_inferences=1.0)
    assert point.execution_ms() == pytest.approx(20.0)
    assert perf.capacity(point, instances=2) == pytest.approx(100)
    assert point.row()["server ms per execution"] == pytest.approx(20.0)
    # Batched windows (30 requests in 10 executions) keep the batch statistics.
    batched = dataclasses.replace(point, executions=10)
    assert batched.execution_ms() == pytest.approx(25.0)


def test_capacity_of_a_batched_level_is_what_the_instance_can_compute(paced_server):
    # Every execution sleeps PACE_MS whatever it carries: with the batcher, eight
    # requests in flight fill batches, and the ceiling grows with the batch.
    config = dict(paced_server.http().get_model_config("paced"),
                  dynamic_batching={"max_queue_delay_microseconds": 2000})
    paced_server.load("paced", config)
    try:
        point, = perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1,
                          concurrency=[8], window_requests=40,
                          attempts=SETTLE_ATTEMPTS)
    finally:
        paced_server.unload("paced")
        paced_server.load("paced")
    # An execution cannot take less than its sleep; on two busy cores the stub's own
    # work can add a quarter or more (CI saw 25 ms). Either way it is one execution's
    # time, whatever the requests waited besides.
    assert point.stable and PACE_MS * 0.98 <= point.exec_ms <= PACE_MS * 1.6
    assert point.exec_inferences > 2
    assert point.infer_per_s <= perf.capacity(point, instances=1) * 1.05


def test_saturation_is_the_most_throughput_and_the_fewest_in_flight_near_it():
    def level(in_flight, rate, stable=True):
        return perf.Point("m", "concurrency", in_flight, stable, infer_per_s=rate)
    sweep = [level(1, 100.0), level(2, 180.0), level(4, 290.0), level(8, 300.0),
             level(16, 310.0, False), level(32, 295.0)]
    top, first = perf.saturation(sweep)
    assert (top.load, first.load) == (8, 4)  # 290 is within 10 % of 300; 16 never settled
    assert perf.saturation(sweep, within=0.01)[1].load == 8
    with pytest.raises(ValueError):
        perf.saturation([level(1, 100.0, False)])

