"""The load generator against a real embedded server, on the small affine models."""

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from conftest import PACE_MS
from tritonbook import loadgen, repository

# They measure load: a test beside them on the same two cores would move their numbers.
pytestmark = pytest.mark.serial

X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def triton(book_server):
    book_server.load("affine_torchscript")
    yield book_server
    book_server.unload("affine_torchscript")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("concurrency", [1, 3])
def test_run_counts_every_request(triton, protocol, concurrency):
    result = loadgen.run(triton, "affine_torchscript", {"input__0": X}, ["output__0"],
                         concurrency=concurrency, requests=12, protocol=protocol,
                         expected={"output__0": 2 * X + 1})
    assert result.requests == 12 and result.batch == 2 and result.concurrency == concurrency
    assert all(latency > 0 for latency in result.latencies)
    assert result.throughput == pytest.approx(12 * 2 / result.wall)
    q1, q3 = result.quartiles
    assert q1 <= result.median <= q3 <= result.percentile(90) + 1e-12
    assert f"concurrency {concurrency}, batch 2" in str(result)
    # Every answer's arrival is inside the run.
    assert len(result.completions) == 12
    assert all(-1e-3 <= t <= result.wall + 1e-3 for t in result.completions)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_measure_reports_stable_windows_and_server_times(triton, protocol):
    result = loadgen.measure(triton, "affine_torchscript", {"input__0": X}, ["output__0"],
                             concurrency=2, protocol=protocol, window=0.2, tolerance=0.5,
                             expected={"output__0": 2 * X + 1})
    # A settling window, then three that agreed; the result is exactly those three.
    assert result.stable and 4 <= len(result.windows) <= 10
    assert result.wall >= 3 * 0.2 - 1e-9
    for column in (0, 1):
        values = [w[column] for w in result.windows[-3:]]
        assert max(values) / min(values) <= 1.5
    assert result.requests >= 60 and all(0 <= t < result.wall for t in result.completions)
    assert result.throughput == pytest.approx(result.requests * 2 / result.wall)
    assert set(result.server) == {"queue", "input", "infer", "output", "overhead"}
    assert all(ms >= 0 for ms in result.server.values())
    assert result.server["infer"] < result.median * 1e3  # the server's part of the client's time
    assert result.instances == 1 and 0 < result.utilisation <= 1.1
    row = result.row()
    assert row["windows"] == len(result.windows) and row["stable"] is True and "server queue ms" in row
    assert "stable after" in str(result)


def test_measure_marks_a_run_that_never_settles_unstable_and_stops_at_the_limit(triton):
    result = loadgen.measure(triton, "affine_torchscript", {"input__0": X}, ["output__0"],
                             concurrency=1, window=0.05, tolerance=0.0, max_windows=5,
                             min_requests=3)
    assert result.stable is False and len(result.windows) == 5
    assert "UNSTABLE after 5 windows" in str(result)


def test_a_request_counts_once_in_the_window_where_its_answer_arrived():
    # Sent at 0.5 s, answered at 2.5 s: it belongs to [2, 3) alone, whatever it spans.
    spans = [(0.5, 2.5), (2.1, 2.6), (2.9, 3.0)]
    assert loadgen._window_stats(spans, 0.0, 1.0, batch=1)[0] == 0
    assert loadgen._window_stats(spans, 1.0, 2.0, batch=1)[0] == 0
    count, throughput, latency = loadgen._window_stats(spans, 2.0, 3.0, batch=2)
    assert count == 2 and throughput == pytest.approx(4.0) and latency == pytest.approx(1.25)
    assert loadgen._window_stats(spans, 3.0, 4.0, batch=1)[0] == 1  # [start, end)


def test_three_windows_agree_only_with_enough_answers_and_both_measures_close():
    steady = [(20, 100.0, 0.010), (21, 105.0, 0.0105), (20, 100.0, 0.010)]
    assert loadgen._triple_agrees(steady, tolerance=0.10, min_requests=60)
    assert not loadgen._triple_agrees(steady, tolerance=0.10, min_requests=62)
    slower = [*steady[:2], (20, 100.0, 0.012)]  # latency 20 % apart
    assert not loadgen._triple_agrees(slower, tolerance=0.10, min_requests=60)
    assert not loadgen._triple_agrees(steady[:2], tolerance=0.10, min_requests=1)


def _totals(requests, executions, busy_ns):
    # The per-request phases credit a batch's time to each of its requests.
    per_request = busy_ns * requests // executions if executions else 0
    return {"requests": requests, "success": per_request, "queue": 0, "input": 0,
            "infer": per_request, "output": 0, "inferences": requests,
            "executions": executions, "busy": busy_ns}


def test_capacity_check_refuses_more_answers_than_instances_can_compute():
    zero = _totals(0, 0, 0)
    # One instance, 100 executions of 10 ms each, one request each: 100/s at most.
    after = _totals(100, 100, 100 * 10_000_000)
    assert loadgen.capacity_check(100, 1.0, zero, after, instances=1) == pytest.approx(100)
    # 1 s holds at most 101 executions (one may have begun before the span) ...
    assert loadgen.capacity_check(111, 1.0, zero, after, instances=1) == pytest.approx(100)
    # ... and 118 answers (the committed GFPGAN point of issue 27, scaled) cannot be.
    with pytest.raises(loadgen.ImplausibleMeasurement, match="at most 101"):
        loadgen.capacity_check(118, 1.0, zero, after, instances=1)
    # Batches of four requests, 10 ms an execution: four times as many answers.
    batched = _totals(400, 100, 100 * 10_000_000)
    assert loadgen.capacity_check(400, 1.0, zero, batched, instances=1) == pytest.approx(400)
    # No instances of its own (an ensemble) or no data: no check.
    assert loadgen.capacity_check(10**6, 1.0, zero, after, instances=None) is None
    assert loadgen.capacity_check(10, 1.0, zero, zero, instances=1) is None


def test_measure_on_a_paced_model_never_reports_more_than_one_instance_can_do(paced_server):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    ceiling = 1000 / PACE_MS
    for concurrency in (1, 4):
        for _ in range(3):  # a busy machine's windows may not agree: measure again
            result = loadgen.measure(paced_server, "paced", {"INPUT__0": x}, ["OUTPUT__0"],
                                     concurrency=concurrency, window=0.2)
            if result.stable:
                break
        # The start, with every worker sending at once, is in no reported window:
        # the throughput stays under the ceiling.
        assert result.stable and result.throughput <= ceiling * 1.02
        # An execution never takes less than the pace; the stub may add to it.
        assert 0.6 * ceiling < result.capacity <= ceiling * 1.02
        assert PACE_MS * 0.98 <= result.server["infer"] <= PACE_MS * 1.6
        # The server answered the same requests the client counted, give or take
        # the ones in flight at the two edges and, at one in flight, the client's turn.
        assert 0.7 < result.utilisation <= 1.05


def test_tail_percentiles_need_five_samples_beyond_them():
    few = loadgen.LoadResult("m", "grpc", 1, 1, tuple(np.linspace(0.01, 0.02, 99)), wall=1.0)
    enough = loadgen.LoadResult("m", "grpc", 1, 1, tuple(np.linspace(0.01, 0.02, 100)), wall=1.0)
    assert np.isnan(few.tail(95)) and np.isnan(few.row()["p95 ms"])
    assert enough.tail(95) == pytest.approx(enough.percentile(95)) and np.isnan(enough.tail(99))
    assert "p95" in str(enough) and "p95" not in str(few)


@pytest.mark.parametrize("measurement", [loadgen.run, loadgen.measure])
def test_a_wrong_answer_fails_the_run(triton, measurement):
    with pytest.raises(AssertionError, match="affine_torchscript output output__0 under load"):
        measurement(triton, "affine_torchscript", {"input__0": X}, ["output__0"], concurrency=2,
                    expected={"output__0": 2 * X})


@pytest.mark.parametrize("measurement", [loadgen.run, loadgen.measure])
def test_a_server_error_is_raised_not_hung(triton, measurement):
    with pytest.raises(InferenceServerException, match="unexpected inference input 'nope'"):
        measurement(triton, "affine_torchscript", {"nope": X}, ["output__0"], concurrency=2)


def test_bad_arguments(triton):
    with pytest.raises(ValueError, match="concurrency"):
        loadgen.run(triton, "affine_torchscript", {"input__0": X}, ["output__0"], concurrency=0)
    with pytest.raises(ValueError, match="cannot keep 4 workers busy"):
        loadgen.run(triton, "affine_torchscript", {"input__0": X}, ["output__0"], concurrency=4, requests=2)
    with pytest.raises(ValueError, match="protocol"):
        loadgen.run(triton, "affine_torchscript", {"input__0": X}, ["output__0"], protocol="udp")
    with pytest.raises(ValueError, match="three to compare"):
        loadgen.measure(triton, "affine_torchscript", {"input__0": X}, ["output__0"], max_windows=3)


def test_sweep_table_and_statistics(triton):
    before = loadgen.executions_by_batch_size(triton, "affine_torchscript")
    results = loadgen.sweep(triton, "affine_torchscript", {"input__0": X}, ["output__0"], [1, 2],
                            window=0.1, tolerance=1.0, progress=False, warmup=0)
    assert all(r.requests >= 8 for r in results)
    table = loadgen.results_table(results)
    assert list(table["concurrency"]) == [1, 2] and (table["infer/s"] > 0).all()
    assert list(table["stable"]) == [True, True]
    after = loadgen.executions_by_batch_size(triton, "affine_torchscript")
    # No dynamic batching: each request of two rows is one execution of batch size 2,
    # and the server ran more than the measured span (the windows before it, the tail).
    measured = sum(r.requests for r in results)
    assert after.get(2, 0) - before.get(2, 0) >= measured
    stats = loadgen.statistics_table(triton, ["affine_torchscript"])
    # Requests of two rows: the server counts requests and rows (inferences) apart.
    assert stats.loc[0, "requests"] >= measured and stats.loc[0, "inferences"] >= 2 * measured
    assert stats.loc[0, "inferences"] - stats.loc[0, "requests"] >= measured
    assert stats.loc[0, "failed"] == 0
    assert stats.loc[0, "compute_infer ms"] > 0


def test_executions_wait_for_the_rows_asked_for(triton):
    import time

    from tritonbook.client import infer

    def rows_held(counts):
        return sum(size * count for size, count in counts.items())

    before = rows_held(loadgen.executions_by_batch_size(triton, "affine_torchscript"))
    for _ in range(3):
        infer(triton, "affine_torchscript", {"input__0": X}, ["output__0"])
    wanted = before + 3 * len(X)
    after = loadgen.executions_by_batch_size(triton, "affine_torchscript", rows=wanted)
    assert rows_held(after) >= wanted
    # Rows that never come: it gives up at its timeout with what there is.
    started = time.monotonic()
    loadgen.executions_by_batch_size(triton, "affine_torchscript", rows=10**9, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 5


def test_plot_sweeps_draws_both_panels(triton):
    results = loadgen.sweep(triton, "affine_torchscript", {"input__0": X}, ["output__0"], [1, 2],
                            window=0.1, max_windows=4, min_requests=3, progress=False)
    fig = loadgen.plot_sweeps({"affine": results}, "test")
    left, right = fig.axes
    assert len(left.lines) == 1 and list(left.lines[0].get_xdata()) == [1, 2]
    assert right.get_ylabel().startswith("latency")


def test_read_config_gives_integer_dims():
    config = repository.read_config("gfpgan_batched")
    assert config["input"][0]["dims"] == [3, 256, 256]
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
