"""When a noticed trainer must stop and its final backup be done: the notice's deadline less the sync margin, the
grace without a deadline, and a few seconds at least when the deadline had already passed."""

from __future__ import annotations

from types import SimpleNamespace

from spotrun.agent.notices import Notice
from spotrun.agent.stop_times import LATE_NOTICE_SECONDS, StopTimes

NOW = 1_000.0


def times(*, deadline: float | None, grace: float = 30.0, margin: float = 2.0, watched: Notice | None = None):
    answered = Notice("local-metadata", deadline, "terminate")
    watcher = SimpleNamespace(notice=watched or answered)
    return StopTimes(watcher, answered, NOW, grace, margin)  # type: ignore[arg-type]


def test_a_deadline_ahead_stops_the_trainer_the_margin_before_it():
    plan = times(deadline=NOW + 120)
    assert (plan.stop_by(), plan.deadline()) == (NOW + 118, NOW + 120)


def test_without_a_deadline_the_trainer_gets_its_grace_and_the_backup_no_deadline():
    plan = times(deadline=None, grace=30)
    assert (plan.stop_by(), plan.deadline()) == (NOW + 30, None)


def test_a_deadline_already_past_still_gives_the_trainer_a_few_seconds():
    """It was killed at once: no save, and the final backup cut short by a deadline behind it."""
    plan = times(deadline=NOW - 30)
    assert plan.stop_by() == NOW + LATE_NOTICE_SECONDS
    assert plan.deadline() == NOW + LATE_NOTICE_SECONDS + 2.0


def test_a_deadline_too_close_for_the_margin_counts_as_late_too():
    assert times(deadline=NOW + 1).stop_by() == NOW + LATE_NOTICE_SECONDS


def test_the_late_floor_is_never_more_than_the_grace():
    assert times(deadline=NOW - 30, grace=3).stop_by() == NOW + 3


def test_a_sooner_deadline_named_later_is_the_one_kept():
    sooner = Notice("sigterm", NOW + 40, "SIGTERM")
    assert times(deadline=NOW + 120, watched=sooner).stop_by() == NOW + 38
