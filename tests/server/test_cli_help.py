"""`spotrun --help` and its groups' help list each command's summary as one paragraph: Typer's rich help kept the
line breaks of a docstring written over several lines, so the listing broke mid-phrase ("admins made and" /
"unmade, tokens made ...") at any terminal width."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spotrun.cli.main import app


@pytest.mark.parametrize(("group", "phrase"), [
    ([], "newest first: users added, disabled and enabled, admins made and unmade, tokens made and revoked"),
    ([], "and the saving (none for a job that failed or was cancelled: its dollars bought no result)."),
    (["checkpoints"], "whether each is complete (and intact). With --verify the exit code is 1"),
    (["user"], "at once and make no new one. Their jobs stay (history, bills), and those not ended keep running"),
])
def test_a_command_s_summary_is_not_broken_where_its_docstring_is(group: list[str], phrase: str) -> None:
    shown = CliRunner().invoke(app, [*group, "--help"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert phrase in shown.output, shown.output


def test_a_command_s_own_help_is_unchanged() -> None:
    shown = CliRunner().invoke(app, ["cost", "--help"], env={"COLUMNS": "300"})
    assert "and the saving (none for a job that failed or was cancelled: its dollars bought no result)." in shown.output
