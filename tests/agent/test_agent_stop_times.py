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


def test_a_stated_deadline_still_ahead_is_kept_however_close():
    plan = times(deadline=NOW + 1)
    assert (plan.stop_by(), plan.deadline()) == (NOW - 1, NOW + 1)  # killed at once; the backup has its second


def test_a_sigterms_own_grace_is_its_deadline_even_a_short_one():
    """The late rule took it for a cloud's deadline: with notice_grace 5, the trainer ran past it."""
    from spotrun.agent.notices import SigtermNotice

    sigterm = SigtermNotice(5.0)
    sigterm.trigger()
    notice = sigterm.poll()
    received = notice.deadline - 5.0
    plan = StopTimes(SimpleNamespace(notice=notice), notice, received + 0.5, 5.0, 2.0)  # type: ignore[arg-type]
    assert (plan.stop_by(), plan.deadline()) == (received + 3.0, received + 5.0)
    late = StopTimes(SimpleNamespace(notice=notice), notice, received + 9.0, 5.0, 2.0)  # type: ignore[arg-type]
    assert late.stop_by() == received + 3.0  # answered after its own grace: no more time


def test_the_late_floor_is_never_more_than_the_grace():
    assert times(deadline=NOW - 30, grace=3).stop_by() == NOW + 3


def test_a_sooner_deadline_named_later_is_the_one_kept():
    sooner = Notice("sigterm", NOW + 40, "SIGTERM")
    assert times(deadline=NOW + 120, watched=sooner).stop_by() == NOW + 38


def test_a_late_cloud_notice_after_a_sigterm_keeps_to_the_sigterms_grace():
    """The cloud's notice, its deadline past, became the one acted on and gave 10 s: past the SIGTERM's own 5 s."""
    sigterm = Notice("sigterm", NOW + 5.0, "SIGTERM", own_grace=True)
    late_cloud = Notice("local-metadata", NOW - 30.0, "terminate")
    plan = StopTimes(SimpleNamespace(notice=late_cloud), sigterm, NOW, 5.0, 2.0)  # type: ignore[arg-type]
    assert (plan.stop_by(), plan.deadline()) == (NOW + 3.0, NOW + 5.0)
