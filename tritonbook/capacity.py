"""How many replicas a rate of traffic needs to meet a latency objective: a queue, simulated.

A closed loop at two requests in flight keeps one serial instance busy all the time: its
throughput is the most the replica can serve (utilisation 1), not a rate it can serve
within an objective. Traffic from many independent users arrives at random (Poisson
arrivals), so requests bunch, wait, and the tail grows long well before utilisation 1.
This module simulates that queue for a replica that takes a fixed ``service_s`` per
request, one request at a time, to find the tail latency at a rate and the replicas a
rate needs:

* ``routing="random"``: each request goes to a replica drawn at random, which is what a
  Service that balances connections from many clients does on average (each replica is
  then a queue of its own, M/D/1);
* ``routing="shared"``: every replica takes the next request from one queue (M/D/c), the
  best any balancer can do; no Kubernetes Service does it.

Both are models: a fixed service time (GFPGAN's varies little at one face), no network
and no batcher. ``tests/test_capacity.py`` holds the simulation to the Pollaczek-Khinchine
mean wait of M/D/1.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

__all__ = ["ROUTINGS", "latencies", "latency_percentile", "replicas_for", "highest_rate", "plan"]

ROUTINGS = ("random", "shared")


def latencies(rate: float, service_s: float, replicas: int, routing: str = "random",
              requests: int = 40_000, seed: int = 0) -> np.ndarray:
    """Each request's time in the system (wait + service), in seconds, for Poisson
    arrivals at ``rate`` per second to ``replicas`` serial replicas of fixed
    ``service_s``, less the first tenth (the queue warming up from empty). The
    replicas must keep up: utilisation below 1."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, not {routing!r}")
    if rate <= 0 or service_s <= 0 or replicas < 1:
        raise ValueError("rate, service_s and replicas must be positive")
    if rate * service_s >= replicas:
        raise ValueError(f"utilisation {rate * service_s / replicas:.2f}: the queue grows forever")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, requests))
    times = np.empty(requests)
    if routing == "random":
        free_at = np.zeros(replicas)
        for i, (arrival, replica) in enumerate(zip(arrivals, rng.integers(0, replicas, requests))):
            start = max(arrival, free_at[replica])
            free_at[replica] = start + service_s
            times[i] = free_at[replica] - arrival
    else:
        free = [0.0] * replicas  # when each replica is next free, as a heap
        for i, arrival in enumerate(arrivals):
            start = max(arrival, heapq.heappop(free))
            heapq.heappush(free, start + service_s)
            times[i] = start + service_s - arrival
    return times[requests // 10:]


def latency_percentile(rate: float, service_s: float, replicas: int, routing: str = "random",
                       percentile: float = 95, **simulation) -> float:
    """The ``percentile`` of ``latencies``, in seconds; infinite when the replicas
    cannot keep up (utilisation 1 or more)."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, not {routing!r}")
    if rate * service_s >= replicas:
        return math.inf
    return float(np.percentile(latencies(rate, service_s, replicas, routing, **simulation),
                               percentile))


def replicas_for(rate: float, service_s: float, objective_s: float, routing: str = "random",
                 percentile: float = 95, **simulation) -> int:
    """The fewest replicas whose ``percentile`` latency meets ``objective_s`` at ``rate``
    (``latency_percentile``). A ValueError when one request alone takes longer."""
    if service_s > objective_s:
        raise ValueError(f"one request takes {service_s:g} s, more than the objective")
    replicas = max(1, math.ceil(rate * service_s))
    while latency_percentile(rate, service_s, replicas, routing, percentile,
                             **simulation) > objective_s:
        replicas += 1
    return replicas


def highest_rate(service_s: float, objective_s: float, percentile: float = 95,
                 precision: float = 0.005, **simulation) -> float:
    """The highest Poisson rate (per second) one serial replica of fixed ``service_s``
    takes with its ``percentile`` latency within ``objective_s``: what the model says
    perf_analyzer's ``--binary-search`` under ``--latency-threshold`` should find for
    such a replica (``perf.highest_rate``). Bisection on the utilisation, to within
    ``precision`` of it; 0 when one request alone takes longer than the objective."""
    if service_s > objective_s:
        return 0.0
    low, high = 0.0, 1.0  # utilisations: low meets the objective, high never does
    while high - low > precision:
        middle = (low + high) / 2
        meets = latency_percentile(middle / service_s, service_s, 1, "random", percentile,
                                   **simulation) <= objective_s
        low, high = (middle, high) if meets else (low, middle)
    return low / service_s


def plan(ceilings: dict[str, float], peak: float, objective_s: float,
         percentile: float = 95):
    """A replica plan per machine, as a pandas table. ``ceilings``: each machine's
    measured ceiling (faces a second one replica serves at full load); one over it is
    the service time. Columns: the highest Poisson rate one replica takes within the
    objective (``highest_rate``) and the share of the ceiling left unused there (the
    headroom), the replicas the ceiling alone gives (``peak / ceiling``,
    rounded up: every replica at full load), the fewest that meet the objective with a
    shared queue and with random routing, the plan (random routing and one more, for the
    loss of a machine), the utilisation and p95 of the plan, and its machine-hours per
    1,000 faces at the peak."""
    import pandas as pd

    rows = {}
    for machine, ceiling in ceilings.items():
        service_s = 1 / ceiling
        shared = replicas_for(peak, service_s, objective_s, "shared", percentile)
        random = replicas_for(peak, service_s, objective_s, "random", percentile)
        planned = random + 1
        within = highest_rate(service_s, objective_s, percentile)
        rows[machine] = {
            "faces/s at the ceiling": ceiling,
            "faces/s within the objective": within,
            "headroom": 1 - within / ceiling,
            "replicas at the ceiling": math.ceil(peak / ceiling),
            "replicas, shared queue": shared,
            "replicas, random routing": random,
            "replicas planned (+1)": planned,
            "utilisation planned": peak / (planned * ceiling),
            f"p{percentile:g} s planned": latency_percentile(
                peak, service_s, planned, "random", percentile),
            "machine-hours per 1,000 faces": planned * 1000 / (3600 * peak),
        }
    return pd.DataFrame(rows).T
