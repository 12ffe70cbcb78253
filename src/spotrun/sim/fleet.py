"""Many jobs in one market at once, sharing what each sees of spot, as spotrun's controller runs them.

The controller hands every job the other jobs' spot tries of the same instance type (`control.placement`'s market
history): a job that arrives where others have run begins with what their launches, instances and preemptions
showed, and goes on learning from them while it runs. `engine.run_job` alone can only show a job the trace itself
before its start (`seen_before`); in the live controller's view that is more than launches ever tell, so it bounds
what the history is worth from above. Here a job starts at each of the chosen offsets, all of them step together on
the market's clock, and all read and write one spot log: what a job knows at its start is what the jobs before it
saw, and no more.

Within a step every job first loses the spot it held if its zone has none, then tells the log where its spot
still runs, and only then does any job decide: a job learns nothing within a step from a job that happens to
decide before it, except what a launch tried in that step answered, as in the controller's own pass over its jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spotrun.policy import SpotLog, StepPolicy
from spotrun.sim.engine import JobRun, Observe, RunResult, SimJob
from spotrun.sim.market import Market

PolicyFor = Callable[[int], StepPolicy]  # the policy of the job that starts at this sample offset


def run_fleet(
    policy_for: PolicyFor, market: Market, starts: Sequence[int], job: SimJob, *, observe: Observe = "launches",
) -> dict[int, RunResult]:
    """A job from every offset of `starts` (samples), each with its own policy, all sharing one spot log; the result
    of each by its start. Each runs until done or the trace ends, as `run_job` does."""
    if len(set(starts)) != len(starts):
        raise ValueError("a fleet's jobs need distinct start offsets")
    if any(not 0 <= start < market.samples for start in starts):
        raise ValueError(f"start offsets must lie in the trace's {market.samples} samples, got {sorted(starts)}")
    log, step = SpotLog(), market.gap_seconds
    job_ids = {start: number for number, start in enumerate(sorted(starts), 1)}
    waiting = sorted(starts, reverse=True)  # popped from the end: the earliest first
    running: dict[int, JobRun] = {}
    results: dict[int, RunResult] = {}
    for sample in range(min(starts, default=0), market.samples):
        while waiting and waiting[-1] == sample:
            start = waiting.pop()
            running[start] = JobRun(
                policy_for(start), market.zones, market.available[:, start:], step, job, observe, job_ids[start],
                origin=start * step, log=log,
            )
        for start, run in running.items():
            run.check_preemption(sample - start)
        for start, run in running.items():
            run.note_held_spot(sample - start)
        over = [start for start, run in running.items() if not run.advance(sample - start)]
        for start in over:
            results[start] = running.pop(start).finish()
        if not running and not waiting:
            break
    for start, run in running.items():  # the trace ended under them
        results[start] = run.finish()
    return results
