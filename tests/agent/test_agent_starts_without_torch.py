"""The agent and the `spotrun` CLI start without importing torch: it took 2 s and 200 MB at each start of either
(the agent found its store through the SDK's storage module, which imports torch), on every instance and command."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAMS = ["spotrun.agent.__main__", "spotrun.cli.main", "spotrun.server.daemon", "spotrun.providers.local.vm"]


@pytest.mark.parametrize("module", PROGRAMS)
def test_the_program_imports_no_torch(module):
    check = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"importing {module} imported torch\n{done.stderr}"
