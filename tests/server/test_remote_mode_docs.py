"""docs/server.md's "The CLI's remote mode" names every command that goes through the team server when
SPOTRUN_SERVER is set: `checkpoints list --job N` asked the server and was left out."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli import checkpoints as checkpoints_cli
from spotrun.cli import main as cli_main
from spotrun.cli.backend import BackendError

SERVER_MD = Path(__file__).parents[2] / "docs" / "server.md"

# a command as the docs name it, and a way to run it
THROUGH_THE_BACKEND = {
    "launch": ["launch", "{job_file}"],
    "status": ["status"],
    "logs": ["logs", "1"],
    "cancel": ["cancel", "1"],
    "preempt": ["preempt", "1"],
    "cost": ["cost", "1"],
    "checkpoints list --job": ["checkpoints", "list", "--job", "1"],
    "checkpoints export --job": ["checkpoints", "export", "{out}", "--job", "1"],
}


def remote_mode_section() -> str:
    text = SERVER_MD.read_text()
    return text[text.index("## The CLI's remote mode"):text.index("## Metrics")]


@pytest.mark.parametrize("named", THROUGH_THE_BACKEND)
def test_a_command_that_asks_the_backend_is_named_in_the_remote_mode_docs(
    named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def backend():
        asked.append(named)
        raise BackendError("asked the backend")

    for module in (cli_main, checkpoints_cli):
        monkeypatch.setattr(module, "current_backend", backend)
    job_file = tmp_path / "job.yaml"
    job_file.write_text("run: 'true'\n")
    arguments = [part.format(job_file=job_file, out=tmp_path / "out.pt") for part in THROUGH_THE_BACKEND[named]]

    result = CliRunner().invoke(cli_main.app, arguments, env={"COLUMNS": "300"})

    assert asked == [named] and "asked the backend" in result.stderr, result.output  # it goes through the server
    assert f"`{named}" in remote_mode_section()
