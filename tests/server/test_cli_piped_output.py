"""What the CLI prints into a pipe or a file (or Click's test runner) is not wrapped: rich took 80 columns there and
broke every longer line mid-phrase ("…$0.0073; on-demand \nonly: …", "(spot in \nlocal-c)"), for a script to
misread. On a terminal lines wrap at its width, as before (`spotrun.cli.consoles`)."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.table import Table
from typer.testing import CliRunner

from spotrun.api_models import BillView, EventView, JobCost, JobRow
from spotrun.cli import main as cli_main
from spotrun.cli.consoles import CliConsole, print_whole
from spotrun.cli.views import follow_events, status_table

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


def _on_a_terminal(table: Table, width: int) -> list[str]:
    screen = StringIO()
    print_whole(CliConsole(file=screen, force_terminal=True, width=width, color_system=None), table)
    return screen.getvalue().splitlines()


def test_on_an_80_column_terminal_no_cell_is_cut() -> None:
    """rich cut the cells of a table wider than the terminal with "…": `status` showed "SUCCEED…" and "$0.0…", and
    `simulate` "…" for every cost, some columns squeezed to nothing. The headers wrap instead, then the padding
    goes."""
    jobs = status_table([JobRow(id=12, name="slowsave", state="SUCCEEDED", attempts=3, preemptions=2,
                                market="on-demand", zone="local-c", elapsed=3725.0, cost=1234.5678,
                                checkpoint_step=None, failure_reason=None)])
    lines = _on_a_terminal(jobs, 80)
    assert all(len(line) <= 80 for line in lines) and not any("…" in line for line in lines), "\n".join(lines)
    assert any("SUCCEEDED" in line and "$1,234.5678" in line and "slowsave" in line for line in lines), lines
    costs = Table("policy", "runs", "mean", "median", "p90", "worst", "> on-demand", "misses", "preemptions",
                  "switches", "moves", "gap closed", title="C=48 h, D=52 h, d=0.1 h")
    costs.add_row("uniform_progress", "300", "0.652", "0.617", "0.953", "1.015", "2.7%", "0", "7.0", "6.9", "0.0",
                  "0%")
    lines = _on_a_terminal(costs, 80)
    assert all(len(line) <= 80 for line in lines) and not any("…" in line for line in lines), "\n".join(lines)
    assert any(all(value in line for value in ("uniform_progress", "300", "0.652", "1.015", "2.7%")) for line in lines)


def test_a_table_that_fits_the_terminal_is_printed_as_it_is() -> None:
    table = Table("id", "state", title="jobs")
    table.add_row("1", "RUNNING")
    fitted = _on_a_terminal(table, 80)
    table = Table("id", "state", title="jobs")
    table.add_row("1", "RUNNING")
    screen = StringIO()
    CliConsole(file=screen, force_terminal=True, width=80, color_system=None).print(table)
    assert fitted == screen.getvalue().splitlines()


def test_a_table_too_wide_to_fit_is_printed_whole_on_a_terminal_too() -> None:
    """Its lines then wrap at the terminal's edge, every value whole, rather than being cut."""
    table = Table("a", "b")
    table.add_row("x" * 50, "y" * 50)
    lines = _on_a_terminal(table, 80)
    assert any("x" * 50 in line for line in lines) and any("y" * 50 in line for line in lines), lines
