"""The sweep profile runs end to end on a small trace: each policy's runs, their costs' digest, and one table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak  # a diagnostic of the policy research, not a behaviour of spotrun: `make soak` runs it

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "sweep_profile.py"


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_each_policy_is_profiled_and_its_costs_digested(small_trace_folder: Path) -> None:
    out = run("--traces", str(small_trace_folder), "--every-hours", "100", "--policy", "greedy",
              "--policy", "omniscient", "--policy", "greedy")
    rows = re.findall(r"^\| (\w+) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d,]+ \| ([0-9a-f]{12}) \|$", out, re.M)
    assert [(policy, runs) for policy, runs, _ in rows] == [("greedy", "1"), ("omniscient", "1"), ("greedy", "1")]
    assert rows[0][2] == rows[2][2] != rows[1][2]  # the same runs, the same digest; other costs, another


def test_one_table_is_timed() -> None:
    assert re.search(r"^one 52 h / 0.1 h table, best of 20: \d+ ms$", run("--one-table", "--deadline-hours", "52",
                                                                         "--overhead-hours", "0.1"), re.M)


def _script_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep_profile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cache_replays_count_what_each_eviction_computes() -> None:
    profile = _script_module()
    # room for two tables of size 1: a b c a b c — LRU drops each table just before it is asked again
    cycle = [(key, 1) for key in "abcabc"]
    assert profile.misses_lru(cycle, 2) == 6
    assert profile.misses_farthest_next_use(cycle, 2) == 4  # a b c, then only b: c drops b, b drops a
    assert profile.misses_lru(cycle, 3) == profile.misses_farthest_next_use(cycle, 3) == 3
    # a, asked often, then a scan of tables asked once: counting keeps a, recency and probation do not (LRU
    # drops a for d), and a second ask protects it
    often = [(key, 1) for key in "aaabcda"]
    assert profile.misses_lru(often, 2) == 5
    assert profile.misses_lfu(often, 2) == 4
    assert profile.misses_segmented_lru(often, 2, 0.5) == 4
    big = [("a", 1), ("big", 2), ("a", 1)]  # a table as large as the cache pushes out everything
    assert profile.misses_lru(big, 2) == profile.misses_farthest_next_use(big, 2) == 3


def test_table_report_replays_what_the_run_computed(small_trace_folder: Path) -> None:
    out = run("--traces", str(small_trace_folder), "--every-hours", "100", "--tables")
    asked = int(re.search(r"([\d,]+) table requests, [\d,]+ changes of table, \d+ distinct", out).group(1)
                .replace(",", ""))
    as_run = int(re.search(r"^\| as run: .* \| (\d+) \|$", out, re.M).group(1))
    replayed = [int(n) for n in re.findall(r"^\| replayed: least recently used out, .* \| (\d+) \|$", out, re.M)]
    assert asked > 0 and as_run >= 1
    assert replayed[0] == as_run  # the replay of markov's own rule computes what the run computed
    assert replayed == sorted(replayed, reverse=True)
