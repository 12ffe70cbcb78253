"""A job's cost line says what it saved against on-demand only when it delivered its result: a failed or cancelled
job spent its dollars for nothing, and "saved 75%" read as a gain. Its line says what it spent and what the same hours
would have cost on-demand. The JSON keeps its fields, for scripts. (A succeeded job's line is as it was:
tests/costs/test_ledger.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import typer
from server_world import place_attempt
from typer.testing import CliRunner

from spotrun.cli import main
from spotrun.cli.embedded import EmbeddedBackend
from spotrun.control import jobs as jobs_api
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Job

BILL_FIELDS = {"spot_seconds", "on_demand_seconds", "cost", "on_demand_cost", "seconds", "saved", "saved_fraction",
               "provisional", "provisional_until"}


def ended_job(state: str) -> int:
    """A job that held a spot instance for an hour at $0.10/h ($0.40/h on-demand), then ended in `state`."""
    store = EmbeddedBackend().store
    job_id = jobs_api.submit(store, parse_spec("name: t\nrun: 'true'\n"), time.time())
    attempt_id = place_attempt(store, job_id, "t1", at=1_000.0)
    with store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        attempt.state, attempt.end_reason, attempt.ended_at, attempt.billed_seconds = "ended", "x", 4_600.0, 3_600.0
        session.get(Job, job_id).state = state
    return job_id


def cost_output(*arguments: str) -> str:
    result = CliRunner().invoke(main.app, ["cost", *arguments], env={"COLUMNS": "400"})
    assert result.exit_code == 0, (result.output, result.exception)
    return " ".join(result.output.split())  # wrapped at the console's width


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED"])
def test_a_job_that_ended_without_a_result_is_not_said_to_have_saved(
    home: Path, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = ended_job(state)
    spent = "$0.1000 spent without a result; on-demand for the same hours: $0.4000"
    line = cost_output(str(job_id))
    assert spent in line and "saved" not in line, line
    with pytest.raises(typer.Exit):  # `spotrun launch --follow`'s last lines, for a job that has ended
        main._follow(EmbeddedBackend(), job_id)
    followed = " ".join(capsys.readouterr().out.split())  # wrapped at the terminal's width
    assert spent in followed and "saved" not in followed, followed

    bill = json.loads(cost_output(str(job_id), "--json"))
    assert BILL_FIELDS <= set(bill) and bill["saved"] == pytest.approx(0.3)  # the fields scripts read, as they were
