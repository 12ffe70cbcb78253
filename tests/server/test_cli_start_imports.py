"""Each `spotrun` command imports what it works with, not what the other commands do: every command started in about
a second, `--help` included, importing SQLAlchemy and the store's models, the server (FastAPI's read models), the
simulator and the policies (numpy), fsspec and the local cloud, whichever the command. The store's commands still load
the store; `--help`, shell completion, `simulate` and the commands sent to a team server do not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import spotrun

TRACE = Path(spotrun.__file__).parent / "data" / "traces" / "aws-10-26-2022_us-west-2a_v100_1.json"

THE_STORE = ["sqlalchemy", "spotrun.state", "spotrun.control.jobs"]
THE_SERVER = ["fastapi", "starlette", "spotrun.server"]
THE_REST = ["spotrun.spec", "numpy", "spotrun.policy", "spotrun.sim.engine", "fsspec", "spotrun.providers", "httpx"]

# The command runs in a fresh interpreter, as `spotrun` does; then the modules it must not have imported are looked for.
CHECK = """
import sys
from spotrun.cli.main import app

absent = sys.argv[1].split(",")
try:
    app(sys.argv[2:], prog_name="spotrun")
except SystemExit as end:
    code = end.code or 0
imported = [module for module in absent if module in sys.modules]
print("exit", code, "imported", imported, file=sys.stderr)
"""


def unreachable_server() -> str:
    """The URL of a port on this machine that nothing listens on: a connection to it is refused at once."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{free.getsockname()[1]}"


def run(arguments: list[str], absent: list[str], tmp_path: Path, **env: str) -> str:
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("SPOTRUN_SERVER", "SPOTRUN_TOKEN", "SPOTRUN_DATABASE_URL")}
    source = str(Path(spotrun.__file__).parents[1])  # this checkout's spotrun, not one installed elsewhere
    environment.update(SPOTRUN_HOME=str(tmp_path / "home"), COLUMNS="200", **env,
                       PYTHONPATH=os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHECK, ",".join(absent), *arguments], env=environment,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("arguments", [["--help"], ["simulate", "--help"], ["checkpoints", "list", "--help"],
                                       ["market", "--help"], ["user", "add", "--help"], ["user", "--help"],
                                       ["user", "disable", "--help"], ["user", "set-admin", "--help"],
                                       ["audit", "--help"]])
def test_help_imports_no_command_s_work(arguments: list[str], tmp_path: Path) -> None:
    assert run(arguments, THE_STORE + THE_SERVER + THE_REST, tmp_path) == "exit 0 imported []"


def test_shell_completion_imports_no_command_s_work(tmp_path: Path) -> None:
    said = run([], THE_STORE + THE_SERVER + THE_REST, tmp_path,
               _SPOTRUN_COMPLETE="complete_bash", COMP_WORDS="spotrun sta", COMP_CWORD="1")
    assert said == "exit 0 imported []"


@pytest.mark.parametrize("arguments", [["status"], ["status", "3", "--json"], ["logs", "3"], ["cost", "3"],
                                       ["preempt", "3", "--notice", "5"], ["cancel", "3"]])
def test_a_command_sent_to_a_team_server_loads_no_store_nor_server(arguments: list[str], tmp_path: Path) -> None:
    # the server is unreachable: the command got as far as asking it (exit 1, "cannot reach the spotrun server")
    said = run(arguments, THE_STORE + THE_SERVER + ["numpy", "fsspec", "spotrun.providers", "spotrun.spec"], tmp_path,
               SPOTRUN_SERVER=unreachable_server(), SPOTRUN_TOKEN="spr_test_token")
    assert said == "exit 1 imported []"


def test_simulate_loads_the_simulator_but_no_store_nor_server(tmp_path: Path) -> None:
    said = run(["simulate", "--trace", str(TRACE), "--policy", "greedy", "--no-bound", "--every-hours", "200",
                "--processes", "1", "--json"], THE_STORE + THE_SERVER + ["fsspec", "spotrun.providers"], tmp_path)
    assert said == "exit 0 imported []"


def test_a_command_of_the_store_still_loads_it(tmp_path: Path) -> None:
    """The check itself: it sees what a command imports."""
    assert run(["status"], THE_STORE, tmp_path) == f"exit 0 imported {THE_STORE}"
