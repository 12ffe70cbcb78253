"""The job state machine: which transitions are allowed, and nothing else."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    WAITING = "WAITING"  # no capacity anywhere (or the policy said wait): backing off before the next try
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# The states of jobs not ended. Queries name them (`state IN (...)`), which the state's index serves: a store keeps
# every job, and `NOT IN` the ended states read every ended job at each controller tick (docs/benchmarks.md).
LIVE = frozenset(JobState) - TERMINAL


def ended_without_result(state: str) -> bool:
    """Whether the job ended without the result it ran for (failed, cancelled): what it spent saved nothing."""
    return state in (JobState.FAILED, JobState.CANCELLED)


def state_names(states: frozenset[JobState]) -> list[str]:
    """The states' names, sorted: the same SQL (and statement cache entry) at every call."""
    return sorted(state.value for state in states)


_ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.PROVISIONING, JobState.WAITING, JobState.FAILED, JobState.CANCELLED}),
    JobState.PROVISIONING: frozenset(
        {
            JobState.RUNNING,
            JobState.PROVISIONING,  # next zone after no capacity, or a restart after an error
            JobState.WAITING,
            JobState.PREEMPTED,  # reclaimed before the agent reported in
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTED,
            JobState.PROVISIONING,  # crashed (counted against max_restarts_on_error) or instance lost
        }
    ),
    JobState.PREEMPTED: frozenset({JobState.PROVISIONING, JobState.WAITING, JobState.FAILED, JobState.CANCELLED}),
    JobState.WAITING: frozenset({JobState.PROVISIONING, JobState.WAITING, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(Exception):
    def __init__(self, current: JobState, target: JobState) -> None:
        super().__init__(f"a job cannot go from {current} to {target}")
        self.current, self.target = current, target


def can_transition(current: JobState | str, target: JobState | str) -> bool:
    return JobState(target) in _ALLOWED[JobState(current)]


def check_transition(current: JobState | str, target: JobState | str) -> JobState:
    """The target state, or IllegalTransition when the machine does not allow the move."""
    if not can_transition(current, target):
        raise IllegalTransition(JobState(current), JobState(target))
    return JobState(target)


def is_terminal(state: JobState | str) -> bool:
    return JobState(state) in TERMINAL
