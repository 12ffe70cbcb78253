"""What the CLI shows from outside (an event's message, a job's name, a zone, an instance id, a cloud's words) is
printed as written, never read as rich markup: `launch --follow` died with a MarkupError on an agent's warning whose
detail, from the cloud's metadata service, held `[/]`, while the job ran on."""

from __future__ import annotations

import time
from io import StringIO
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from spotrun.api_models import AttemptView, EventView, JobRow
from spotrun.cli.embedded import EmbeddedBackend
from spotrun.cli.main import app
from spotrun.cli.views import attempts_table, follow_events, progress_line, status_table
from spotrun.control import jobs as jobs_api
from spotrun.spec import parse_spec
from spotrun.state import Job

MARKUP = "see [/] and [link=file:///etc/passwd]click[/link] [bold red]now"


def row(state: str = "RUNNING") -> JobRow:
    return JobRow(id=7, name=f"job {MARKUP}", state=state, attempts=1, preemptions=0, market="spot",
                  zone=f"zone {MARKUP}", elapsed=5.0, cost=0.01, checkpoint_step=None, failure_reason=None)


def event(number: int, kind: str, message: str) -> EventView:
    return EventView(id=number, at=1_700_000_000.0 + number, kind=kind, message=message, attempt_id=None)


class FollowedBackend:
    """What `follow_events` reads: a running job with a warning event, then the job ended."""

    def __init__(self) -> None:
        self.polls = 0

    def rows(self, job_id: int) -> list[JobRow]:
        self.polls += 1
        return [row("RUNNING" if self.polls == 1 else "SUCCEEDED")]

    def events(self, job_id: int, after: int) -> list[EventView]:
        events = [event(1, "early_warning", f"agent warning: {MARKUP}"), event(2, "state", f"RUNNING: {MARKUP}")]
        return [e for e in events if e.id > after] if self.polls == 1 else []


def printed(renderable) -> str:
    out = StringIO()
    Console(file=out, width=400).print(renderable)
    return out.getvalue()


def test_follow_prints_an_event_message_with_markup_as_written() -> None:
    out = StringIO()
    assert follow_events(FollowedBackend(), 7, Console(file=out, width=400), poll=0) == "SUCCEEDED"
    text = out.getvalue()
    assert f"agent warning: {MARKUP}" in text and f"RUNNING: {MARKUP}" in text, text


def test_the_progress_line_and_the_tables_show_the_stores_words_as_written() -> None:
    assert f"spot in zone {MARKUP}" in progress_line(row()).plain
    assert f"job {MARKUP}" in printed(status_table([row()])).replace("\n", "")
    attempt = AttemptView(
        number=1, state="ended", provider="local", market="spot", zone="z [/]", instance_type="t",
        instance_id="i-[bold]1", created_at=1.0, started_at=1.0, agent_started_at=None, notice_at=None, ended_at=2.0,
        end_reason="preempted [/x]", warning="aws-imds/[/] rebalance", billed_seconds=1.0, price_per_hour=1.0,
        on_demand_price_per_hour=3.0, checkpoint_step=None, log_bytes=0,
    )
    shown = printed(attempts_table([attempt], 7, 3.0))
    for written in ("z [/]", "i-[bold]1", "preempted [/x], warned: [/] rebalance"):
        assert written in shown, shown


def test_status_and_cost_show_a_stored_jobs_name_as_written(home: Path) -> None:
    """A job stored by another spotrun, or a server's answer, may name it anything: its name is not markup."""
    store = EmbeddedBackend().store
    job_id = jobs_api.submit(store, parse_spec("name: t\nrun: 'true'\n"), time.time())
    with store.session() as session:
        session.get(Job, job_id).name = f"job {MARKUP}"
    runner = CliRunner()
    for arguments in (["status"], ["status", str(job_id)], ["cost", str(job_id)]):
        result = runner.invoke(app, arguments, env={"COLUMNS": "400"})
        assert result.exit_code == 0 and f"job {MARKUP}" in result.output, (arguments, result.output)
