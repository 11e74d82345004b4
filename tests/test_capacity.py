"""The queue that sizes chapter 7's fleet, against what queueing theory says of it."""

import math

import pytest

from tritonbook import capacity


def test_one_replica_waits_as_pollaczek_khinchine_says():
    # M/D/1, service 1 s: mean wait rho S / (2 (1 - rho)), plus the service itself.
    for rho in (0.5, 0.8):
        times = capacity.latencies(rho, 1.0, 1, requests=100_000)
        expected = 1 + rho / (2 * (1 - rho))
        assert abs(times.mean() / expected - 1) < 0.05, (rho, times.mean())
        assert times.min() > 1 - 1e-9  # no request is served faster than its service
    # With one replica, random routing and a shared queue are the same queue.
    assert capacity.latency_percentile(0.5, 1, 1, "random") == capacity.latency_percentile(
        0.5, 1, 1, "shared")


def test_a_replica_at_full_load_never_meets_an_objective():
    assert capacity.latency_percentile(2.0, 0.5, 1) == math.inf
    with pytest.raises(ValueError, match="grows forever"):
        capacity.latencies(2.0, 0.5, 1)
    assert capacity.latency_percentile(19.9, 0.5, 10, routing="shared") > 3


def test_a_shared_queue_needs_no_more_replicas_than_random_routing():
    shared = capacity.replicas_for(20, 0.49, 3.0, routing="shared")
    random = capacity.replicas_for(20, 0.49, 3.0, routing="random")
    # Saturation alone (20 x 0.49 = 9.8) would say 10.
    assert 10 < shared <= random
    # The answer is the fewest: one replica fewer misses the objective.
    assert capacity.latency_percentile(20, 0.49, random - 1) > 3.0
    assert capacity.latency_percentile(20, 0.49, random) <= 3.0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="routing"):
        capacity.latency_percentile(1, 1, 1, routing="round robin")
    with pytest.raises(ValueError, match="more than the objective"):
        capacity.replicas_for(1, 5, 3)


def test_a_plan_meets_its_objective_with_a_spare_and_costs_what_its_replicas_cost():
    table = capacity.plan({"cpu": 2.04, "gpu": 84.6}, peak=20, objective_s=3.0)
    cpu = table.loc["cpu"]
    assert cpu["replicas at the ceiling"] == 10  # 20 / 2.04, every replica at load 0.98
    assert cpu["replicas planned (+1)"] == cpu["replicas, random routing"] + 1
    assert cpu["p95 s planned"] <= 3.0 and cpu["utilisation planned"] < 1
    assert cpu["machine-hours per 1,000 faces"] == pytest.approx(
        cpu["replicas planned (+1)"] * 1000 / (3600 * 20))
    assert table.loc["gpu", "replicas planned (+1)"] == 2  # one, and one spare
    # Random routing splits Poisson arrivals into Poisson arrivals at peak / N a
    # replica: the plan is the peak over what one replica takes within the objective.
    within = cpu["faces/s within the objective"]
    assert cpu["replicas, random routing"] == math.ceil(20 / within)
    assert cpu["headroom"] == pytest.approx(1 - within / 2.04) and 0 < cpu["headroom"] < 1


def test_the_highest_rate_meets_the_objective_and_a_little_more_does_not():
    service_s, objective_s = 0.5, 3.0
    rate = capacity.highest_rate(service_s, objective_s)
    assert capacity.latency_percentile(rate, service_s, 1) <= objective_s
    assert capacity.latency_percentile(rate + 0.01 / service_s, service_s, 1) > objective_s
    # A looser objective admits more traffic, never past the ceiling (1 / service).
    looser = capacity.highest_rate(service_s, 2 * objective_s)
    assert rate < looser < 1 / service_s
    assert capacity.highest_rate(service_s, 0.4) == 0.0  # one request alone is too slow
