"""What the CLI prints into a pipe or a file (or Click's test runner) is not wrapped: rich took 80 columns there and
broke every longer line mid-phrase ("…$0.0073; on-demand \nonly: …", "(spot in \nlocal-c)"), for a script to
misread. On a terminal lines wrap at its width, as before (`spotrun.cli.consoles`)."""

from __future__ import annotations

from io import StringIO

import pytest
from typer.testing import CliRunner

from spotrun.api_models import BillView, EventView, JobCost, JobRow
from spotrun.cli import main as cli_main
from spotrun.cli.consoles import CliConsole
from spotrun.cli.views import follow_events

LONG_NAME = "a-job-whose-name-is-long-enough-to-push-its-cost-line-past-eighty-columns"
PLACED_AFTER_REFUSALS = ("attempt 5 placed (spot in local-c): the policy chose spot in local-c, the zone whose spot "
                         "was seen last, after 4 refused tries in local-a and local-b")


@pytest.fixture(autouse=True)
def no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich's width where nothing says one: 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)


class EndedJob:
    """A backend holding one job that has ended, with a long name, and an event with a long message."""

    def cost(self, job_id: int) -> JobCost:
        bill = BillView(spot_seconds=60.0, on_demand_seconds=0.0, cost=0.0073, on_demand_cost=0.051, seconds=60.0,
                        saved=0.0437, saved_fraction=0.857)
        return JobCost(job_id=job_id, name=LONG_NAME, state="SUCCEEDED", bill=bill)

    def rows(self, job_id: int | None = None, **selection) -> list[JobRow]:
        return [JobRow(id=1, name=LONG_NAME, state="SUCCEEDED", attempts=5, preemptions=0, market=None, zone=None,
                       elapsed=60.0, cost=0.0073, checkpoint_step=None, failure_reason=None)]

    def events(self, job_id: int, after: int) -> list[EventView]:
        placed = EventView(id=1, at=1_700_000_000.0, kind="attempt_started", message=PLACED_AFTER_REFUSALS,
                           attempt_id=5)
        return [placed] if after < 1 else []


def test_a_piped_cost_line_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "current_backend", EndedJob)
    result = CliRunner().invoke(cli_main.app, ["cost", "1"])
    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    assert line.startswith(f"job 1 ({LONG_NAME}, SUCCEEDED): ran 60 s") and "on-demand only: $0.0510" in line, line


def test_the_followed_events_are_whole_lines_in_a_pipe() -> None:
    piped = StringIO()
    assert follow_events(EndedJob(), 1, CliConsole(file=piped), poll=0) == "SUCCEEDED"
    assert PLACED_AFTER_REFUSALS in piped.getvalue().splitlines()[0], piped.getvalue()


def test_on_a_terminal_lines_still_wrap_at_its_width() -> None:
    screen = StringIO()
    CliConsole(file=screen, force_terminal=True, width=40, color_system=None).print(PLACED_AFTER_REFUSALS)
    assert len(screen.getvalue().splitlines()) > 1 and all(len(line) <= 40 for line in screen.getvalue().splitlines())
