"""`make demo-ddp`'s output read in a file or a pipe (a CI log, `| tee`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DDP = Path(__file__).resolve().parents[2] / "examples" / "ddp"


def test_the_ddp_demo_keeps_its_wide_lines_whole_where_its_output_is_no_terminal():
    """Where its output is no terminal, rich takes 80 columns: the per-node status table (150 wide) and the sha256
    lines wrapped."""
    table_row = "│ 1 │ 0    │ 127.0.0.2 │ spot   │ local-c │ li-ff0c94b97a27 │ 19:17:22 │ 19:18:05 │ preempted │ 43 │ $0.0114 │"
    hashes = f"final weights sha256      {'9' * 64}"
    script = (f"import sys; sys.path.insert(0, {str(DDP)!r}); import demo; "
              f"demo.console.print({table_row!r}); demo.console.print({hashes!r})")
    environ = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environ, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == [table_row, hashes]
