"""Simulation processes keep the heap memory they free (spotrun.sim.heap)."""

import subprocess
import sys

import pytest

# Frees ~25 MB of 60 KB blocks (an omniscient plan's rows), then allocates and fills as much again; prints the page
# faults the second round took.
ROUND_TRIP = """
import resource, sys
import numpy as np
from spotrun.sim.heap import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
rows = [np.ones(7200) for _ in range(420)]
del rows
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rows = [np.ones(7200) for _ in range(420)]
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_of_the_second_round(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP, mode], capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_memory_freed_by_one_run_is_reused_by_the_next_without_page_faults():
    kept, returned = faults_of_the_second_round("keep"), faults_of_the_second_round("default")
    assert returned > 3000  # ~6,000 pages faulted in again: the memory had gone back to the kernel
    assert kept < returned / 10
