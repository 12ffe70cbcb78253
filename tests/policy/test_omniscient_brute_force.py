"""The omniscient DP against brute force over every schedule on tiny traces, and replayed through the engine."""

import itertools

import numpy as np
import pytest

from spotrun.policy.omniscient import OmniscientPolicy, Problem, optimal_cost
from spotrun.sim.engine import SimJob, run_job

STEP = 600.0
SPOT, OD = 0.9731, 3.06


def brute_force(available: np.ndarray, compute: float, steps: int, overhead: float, spot=None) -> float:
    """Cheapest schedule over all choices per step of: idle, on-demand, spot in zone z (the paper's model); `spot`:
    each zone's spot price (default: SPOT in every zone)."""
    spot = spot or [SPOT] * available.shape[0]
    zones = available.shape[0]
    choices = [None, ("od", None)] + [("spot", z) for z in range(zones)]
    best = np.inf
    for plan in itertools.product(choices, repeat=steps):
        held, owed, done, cost, feasible = None, 0.0, 0.0, 0.0, True
        for t, choice in enumerate(plan):
            if done >= compute - 1e-9:
                break
            if held is not None and held[0] == "spot" and not available[held[1], t]:
                held = None  # preempted
            if choice is not None and choice[0] == "spot" and not available[choice[1], t]:
                feasible = False
                break
            if choice != held and choice is not None:
                owed = overhead
            held = choice
            if held is not None:
                cost += (spot[held[1]] if held[0] == "spot" else OD) * STEP / 3600
                work = max(STEP - owed, 0.0)
                owed = max(owed - STEP, 0.0)
                done = min(done + work, compute)
        if feasible and done >= compute - 1e-9:
            best = min(best, cost)
    return best


def problem(available, compute, steps, overhead):
    return Problem(np.asarray(available, dtype=bool), STEP, compute, steps * STEP, overhead, SPOT, OD)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("overhead", [0.0, 360.0, 720.0])
def test_dp_matches_brute_force_on_one_zone(seed, overhead):
    rng = np.random.default_rng(seed)
    steps = 7
    available = rng.random((1, steps)) < 0.6
    compute = 3 * STEP - (overhead % STEP)
    expected = brute_force(available, compute, steps, overhead)
    assert optimal_cost(problem(available, compute, steps, overhead)) == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(3))
def test_dp_matches_brute_force_on_two_zones(seed):
    rng = np.random.default_rng(100 + seed)
    steps = 5
    available = rng.random((2, steps)) < 0.5
    compute = 2 * STEP
    expected = brute_force(available, compute, steps, 360.0)
    assert optimal_cost(problem(available, compute, steps, 360.0)) == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(3))
def test_dp_matches_brute_force_with_zones_priced_apart(seed):
    rng = np.random.default_rng(200 + seed)
    steps = 5
    available = rng.random((2, steps)) < 0.6
    compute, prices = 2 * STEP, [0.6, 1.4]
    expected = brute_force(available, compute, steps, 360.0, prices)
    priced = Problem(np.asarray(available), STEP, compute, steps * STEP, 360.0, SPOT, OD, zone_spot_prices=tuple(prices))
    assert optimal_cost(priced) == pytest.approx(expected)
    # and the plan, replayed in the engine at the same prices, costs what the DP says
    window = np.concatenate([available, np.zeros((2, 3), bool)], axis=1)
    job = SimJob(compute_seconds=compute, deadline_seconds=steps * STEP, restart_overhead=360.0,
                 zone_spot_prices=(("a", 0.6), ("b", 1.4)))
    result = run_job(OmniscientPolicy.plan(priced, ("a", "b")), ("a", "b"), window, STEP, job)
    assert result.met_deadline and result.cost == pytest.approx(expected)


def test_infeasible_deadline_costs_infinity():
    assert optimal_cost(problem([[True] * 3], 4 * STEP, 3, 0.0)) == np.inf


@pytest.mark.parametrize("overhead", [360.0, 720.0])
def test_replaying_the_optimal_plan_in_the_engine_costs_what_the_dp_says(overhead):
    rng = np.random.default_rng(7)
    available = rng.random((2, 80)) < 0.55
    job = SimJob(compute_seconds=40 * STEP, deadline_seconds=60 * STEP, restart_overhead=overhead)
    plan = OmniscientPolicy.plan(problem(available[:, :60], job.compute_seconds, 60, overhead), ("a", "b"))
    result = run_job(plan, ("a", "b"), available, STEP, job)
    assert result.met_deadline
    assert result.cost == pytest.approx(plan.cost)
