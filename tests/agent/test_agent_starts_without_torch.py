"""The agent and the `spotrun` CLI start without importing torch: it took 2 s and 200 MB at each start of either
(the agent found its store through the SDK's storage module, which imports torch), on every instance and command."""

from __future__ import annotations

import subprocess
import sys

PROGRAMS = ["spotrun.agent.__main__", "spotrun.cli.main", "spotrun.server.daemon", "spotrun.providers.local.vm"]

# One interpreter for all of them (each started its own: 4 starts, most of them importing the same packages): torch is
# looked for after each import, so the one that brought it in is the one named.
CHECK = """
import importlib, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
    if "torch" in sys.modules:
        sys.exit(f"importing {module} imported torch")
"""


def test_the_programs_import_no_torch():
    done = subprocess.run([sys.executable, "-c", CHECK, *PROGRAMS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
