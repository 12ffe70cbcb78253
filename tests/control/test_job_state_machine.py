import pytest

from spotrun.control.states import TERMINAL, IllegalTransition, JobState, can_transition, check_transition

ALLOWED = [
    ("PENDING", "PROVISIONING"),
    ("PROVISIONING", "RUNNING"),
    ("PROVISIONING", "PROVISIONING"),
    ("PROVISIONING", "WAITING"),
    ("RUNNING", "SUCCEEDED"),
    ("RUNNING", "FAILED"),
    ("RUNNING", "CANCELLED"),
    ("RUNNING", "PREEMPTED"),
    ("RUNNING", "PROVISIONING"),
    ("PREEMPTED", "PROVISIONING"),
    ("PREEMPTED", "WAITING"),
    ("WAITING", "PROVISIONING"),
    ("WAITING", "CANCELLED"),
    ("PENDING", "CANCELLED"),
]

REFUSED = [
    ("PENDING", "RUNNING"),
    ("PENDING", "SUCCEEDED"),
    ("PROVISIONING", "SUCCEEDED"),
    ("PREEMPTED", "RUNNING"),
    ("PREEMPTED", "SUCCEEDED"),
    ("WAITING", "RUNNING"),
    ("SUCCEEDED", "RUNNING"),
    ("FAILED", "PROVISIONING"),
    ("CANCELLED", "PENDING"),
    ("SUCCEEDED", "SUCCEEDED"),
]


@pytest.mark.parametrize(("current", "target"), ALLOWED)
def test_allowed_transitions(current, target):
    assert can_transition(current, target)
    assert check_transition(current, target) == JobState(target)


@pytest.mark.parametrize(("current", "target"), REFUSED)
def test_refused_transitions(current, target):
    assert not can_transition(current, target)
    with pytest.raises(IllegalTransition, match=f"from {current} to {target}"):
        check_transition(current, target)


def test_terminal_states_have_no_way_out():
    for terminal in TERMINAL:
        assert not any(can_transition(terminal, target) for target in JobState)


def test_every_live_state_can_be_cancelled():
    for state in set(JobState) - TERMINAL:
        assert can_transition(state, JobState.CANCELLED), state
