"""A job stored before prices were capped (`spec.fields.MAX_PRICE_PER_HOUR`), at 1e308 $/h: its attempts' dollars
overflowed to inf, and their savings to NaN. The API answered null for them, without saying why; `spotrun status
--json` and `spotrun cost --json` printed Infinity and NaN, which no JSON reader takes; `spotrun cost` failed on
decimal.InvalidOperation. Such an attempt is left out of every bill, and each view says so."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from server_world import Team, place_attempt
from typer.testing import CliRunner

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.main import app
from spotrun.control import jobs as jobs_api
from spotrun.spec import parse_spec
from spotrun.state import Attempt, Job, Store

LEFT_OUT = "1 attempt left out: stored at over 1,000,000 $/h, a price no instance has"


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def store_over_the_cap(store: Store, job_id: int) -> None:
    """Attempt 1 held 2 h at 1e308 $/h, as stored before the cap; attempt 2 held 1 h at $0.10/h ($0.40 on-demand)."""
    for number, price, on_demand, seconds in ((1, 1e308, 1e308, 7_200.0), (2, 0.1, 0.4, 3_600.0)):
        attempt_id = place_attempt(store, job_id, f"t{number}", number=number, at=1_000.0 * number)
        with store.session() as session:
            attempt = session.get(Attempt, attempt_id)
            attempt.price_per_hour, attempt.on_demand_price_per_hour = price, on_demand
            attempt.state, attempt.end_reason = "ended", "failed"
            attempt.ended_at, attempt.billed_seconds = attempt.started_at + seconds, seconds
    with store.session() as session:
        session.get(Job, job_id).state = "FAILED"


def test_the_api_answers_valid_json_that_says_what_the_bill_leaves_out(team: Team) -> None:
    job_id = team.launch("alice")
    store_over_the_cap(team.store, job_id)

    def read(path: str) -> Any:
        response = team.client.get(f"/api/v1/jobs{path}", headers=team.as_user("alice"))
        assert response.status_code == 200, response.text
        return strict_json(response.text)

    [row] = read("")
    detail, cost = read(f"/{job_id}"), read(f"/{job_id}/cost")
    assert row["cost"] == detail["job"]["cost"] == pytest.approx(0.1) and row["unpriced_attempts"] == 1
    for bill in (detail["bill"], cost["bill"]):
        assert bill["cost"] == pytest.approx(0.1) and bill["on_demand_cost"] == pytest.approx(0.4)
        assert bill["saved"] == pytest.approx(0.3) and bill["unpriced_attempts"] == 1
        assert bill["seconds"] == 3_600.0  # the attempt left out is left out of the seconds too
    assert [attempt["cost"] for attempt in detail["attempts"]] == [None, pytest.approx(0.1)]


def test_the_cli_shows_what_it_leaves_out_and_prints_valid_json(home: Path) -> None:
    store = EmbeddedBackend().store
    job_id = jobs_api.submit(store, parse_spec("name: t\nrun: 'true'\n"), time.time())
    store_over_the_cap(store, job_id)
    runner = CliRunner()

    def run(*arguments: str) -> str:
        result = runner.invoke(app, list(arguments), env={"COLUMNS": "400"})
        assert result.exit_code == 0, (arguments, result.output, result.exception)
        return result.output

    [row] = strict_json(run("status", "--json"))
    assert row["cost"] == pytest.approx(0.1) and row["unpriced_attempts"] == 1
    bill = strict_json(run("cost", str(job_id), "--json"))
    assert bill["cost"] == pytest.approx(0.1) and bill["saved_fraction"] == pytest.approx(0.75)
    assert bill["unpriced_attempts"] == 1
    assert "$0.1000 + 1 unpriced" in run("status")
    attempts = run("status", str(job_id))
    assert "unpriced: over 1,000,000 $/h" in attempts and "1e+308" in attempts and "$inf" not in attempts
    assert " ".join(run("cost", str(job_id)).split()).endswith(LEFT_OUT)  # wrapped at the console's width
