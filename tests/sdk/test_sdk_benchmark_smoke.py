"""The checkpoint benchmark runs end to end at a small size and reports every method and target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Soak runs (`make soak`, ~65 s in all): these check that the benchmarks still run; what they measure (saves, restores,
# host memory, sharded and object-store saves, transfers) has its own tests in tests/sdk and tests/agent
pytestmark = pytest.mark.soak

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "checkpoint.py"


def test_checkpoint_benchmark_small_run(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--size-gib", "0.02", "--repeats", "1", "--dir", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    summary = report["summary"]
    assert 0.015 * 2**30 < summary["state_bytes"] < 0.025 * 2**30
    assert summary["raw_write_MBps"] > 0 and summary["raw_read_MBps"] > 0
    methods = summary["methods"]
    assert set(methods) | set(summary["unavailable"]) == {"torch.save (sync)", "torch DCP async_save", "spotrun Checkpointer"}
    for name in ("torch.save (sync)", "spotrun Checkpointer"):
        measured = methods[name]
        assert 0 < measured["blocked_s"] <= measured["durable_s"]
        assert measured["restore_s"] > 0 and measured["restore_warm_s"] > 0
        assert measured["disk_bytes"] >= summary["state_bytes"]
    assert set(summary["targets"]) == {
        "blocked_vs_torch_save", "durable_vs_raw_write", "restore_vs_raw_read", "restore_on_warm_memory_vs_raw_read",
        "peak_extra_vs_state",
    }
    assert "target peak_extra_vs_state" in done.stdout and "spotrun Checkpointer" in done.stdout


def test_restore_breakdown_small_run(tmp_path: Path) -> None:
    script = SCRIPT.parent / "restore_breakdown.py"
    done = subprocess.run(
        [sys.executable, str(script), "--size-gib", "0.02", "--repeats", "2", "--dir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert len(rows) == 2 and all(len(row) == 5 for row in rows)
    for raw, restore, ratio, load, small in ([float(cell) for cell in row] for row in rows):
        assert raw > 0 and restore > 0 and abs(ratio - raw / restore) < 0.05  # printed to 3 decimals
        assert 0 < load < restore and 0 < small < restore  # the timed functions are still the ones a restore calls


def test_host_memory_probe_small_run() -> None:
    script = SCRIPT.parent / "host_memory.py"
    done = subprocess.run(
        [sys.executable, str(script), "--gib", "0.01", "--waits", "0", "0.1"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("first touch:") and len(lines) == 3
    assert all(line.endswith("GB/s") for line in lines)


BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def test_sharded_and_object_store_benchmarks_small_runs() -> None:
    """benchmarks/sharded_checkpoints.py, object_store_save.py and store_transfer.py run end to end at a small size
    (store_transfer's runs compare the restored files with the originals)."""
    sharded = subprocess.run(
        [sys.executable, str(BENCHMARKS / "sharded_checkpoints.py"), "--layers", "2", "--width", "512", "--repeats", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    rows = {line.split()[0]: line.split()[1:] for line in sharded.stdout.splitlines() if line.split()}
    assert float(rows["ddp"][2]) > 2 * float(rows["ddp-spread"][2]) * 0.9  # rank 0 MB: spread halves it
    assert float(rows["fsdp"][3]) > 0  # rank 1 writes its shard
    stored = subprocess.run(
        [sys.executable, str(BENCHMARKS / "object_store_save.py"), "--size-mib", "8", "--repeats", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert stored.returncode == 0, stored.stderr[-3000:]
    assert "state 8 MiB" in stored.stdout and "peak extra MiB" in stored.stdout
    transfer = subprocess.run(
        [sys.executable, str(BENCHMARKS / "store_transfer.py"), "--size-mib", "8", "--files", "2", "--repeats", "1"],
        capture_output=True, text=True, timeout=300,
    )
    assert transfer.returncode == 0, transfer.stderr[-3000:]
    assert "checkpoint 8 MiB in 2 file(s)" in transfer.stdout and "parts / stream" in transfer.stdout
