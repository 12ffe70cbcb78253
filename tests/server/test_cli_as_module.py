"""`python -m spotrun` is the `spotrun` command (an environment whose scripts folder is not on PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_python_m_spotrun_runs_the_cli_under_its_own_name(tmp_path: Path) -> None:
    shown = subprocess.run([sys.executable, "-m", "spotrun", "--help"], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "SPOTRUN_HOME": str(tmp_path), "COLUMNS": "100",
                                **_python_path()})
    assert shown.returncode == 0, shown.stderr
    assert "Usage: spotrun " in shown.stdout and "launch" in shown.stdout


def test_python_m_spotrun_exits_as_the_cli_does_on_a_bad_argument(tmp_path: Path) -> None:
    refused = subprocess.run([sys.executable, "-m", "spotrun", "status", "-1"], capture_output=True, text=True,
                             timeout=60, env={"PATH": "/usr/bin:/bin", "SPOTRUN_HOME": str(tmp_path), **_python_path()})
    assert refused.returncode == 2 and "positive whole number" in refused.stderr


def _python_path() -> dict[str, str]:
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
