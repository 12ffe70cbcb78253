"""Loading, validating and replaying availability traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spotrun.traces import (
    TraceError,
    bundled_traces_dir,
    bundled_zone_traces,
    list_traces,
    load_trace,
    parse_trace,
    shared_traces_dir,
)


def test_bundled_traces_are_the_real_aws_files() -> None:
    zones = bundled_zone_traces()
    assert sorted(zones) == ["local-a", "local-b", "local-c"]
    trace = load_trace(zones["local-a"])
    assert trace.gap_seconds == 600.0 and len(trace) == 3895 and trace.data.dtype == np.int64
    assert 0.79 < trace.availability() < 0.80  # us-west-2a v100 1-node, as the README says
    assert trace.source == zones["local-a"]
    assert set(list_traces()) == set(zones.values())
    assert (bundled_traces_dir() / "README.md").read_text().count("skypilot-org/spot-traces") >= 1


def test_bundled_copies_match_the_shared_originals() -> None:
    original = shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022" / "us-west-2b_v100_1.json"
    assert np.array_equal(load_trace(original).data, load_trace(bundled_zone_traces()["local-b"]).data)


def test_available_follows_samples_and_loops() -> None:
    trace = parse_trace({"metadata": {"gap_seconds": 10}, "data": [1, 0, 3]})
    assert [trace.available(t) for t in (0, 9.9, 10, 20, 29.9, 30, 41)] == [True, True, False, True, True, True, False]
    assert trace.available(25, nodes=3) and not trace.available(25, nodes=4)
    assert trace.duration_seconds == 30
    assert list(trace.preemption_indices()) == [1]


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ({"data": [1]}, "missing 'metadata.gap_seconds'"),
        ({"metadata": {"gap_seconds": 600}}, "missing 'data'"),
        ({"metadata": {"gap_seconds": 600}, "data": []}, "'data' is empty"),
        ({"metadata": {"gap_seconds": 600}, "data": [1, "x"]}, r"data\[1\] must be a whole number of instances"),
        ({"metadata": {"gap_seconds": 600}, "data": [10**30]}, r"data\[0\] .* got a number of about 30 digits"),
        ({"metadata": {"gap_seconds": 600}, "data": [1e30]}, r"data\[0\] .* got 1e\+30"),
        ({"metadata": {"gap_seconds": 10**400}, "data": [1]}, "got a number of about 400 digits"),
        ({"metadata": {"gap_seconds": 600}, "data": [1, -1]}, r"data\[1\]"),
        ({"metadata": {"gap_seconds": 600}, "data": [0.5]}, r"data\[0\]"),
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, "positive number"),
        ({"metadata": {"gap_seconds": "600"}, "data": [1]}, "positive number"),
        ([1, 0], "expected a JSON object"),
    ],
)
def test_bad_traces_are_refused_with_a_clear_error(tmp_path: Path, document: object, complaint: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(TraceError, match=complaint) as raised:
        load_trace(path)
    assert str(path) in str(raised.value)


def test_unreadable_trace_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "absent.json")
    (tmp_path / "garbled.json").write_text("{")
    with pytest.raises(TraceError, match="not valid JSON"):
        load_trace(tmp_path / "garbled.json")
    # each was a traceback (RecursionError, ValueError, UnicodeDecodeError) naming no file
    for name, content, complaint in (
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ("long.json", b'{"metadata": {"gap_seconds": 600}, "data": [' + b"9" * 5000 + b"]}", "not valid JSON"),
        ("latin.json", b'{"metadata": {"gap_seconds": 600}, "data": [1], "note": "\xe9"}',
         "not UTF-8 text"),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(TraceError, match=complaint) as raised:
            load_trace(tmp_path / name)
        assert str(tmp_path / name) in str(raised.value)


def test_shared_traces_dir_is_found_or_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTRUN_TRACES_DIR", raising=False)
    assert (shared_traces_dir() / "README.md").exists()
    listed = list_traces(shared_traces_dir())
    assert shared_traces_dir() / "availability/1-node/aws-10-26-2022/us-west-2a_v100_1.json" in listed
    assert all(path.suffix == ".json" for path in listed) and len(listed) == len(set(listed)) >= 8
    monkeypatch.setenv("SPOTRUN_TRACES_DIR", str(tmp_path))
    assert shared_traces_dir() == tmp_path
    monkeypatch.setenv("SPOTRUN_TRACES_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="SPOTRUN_TRACES_DIR"):
        shared_traces_dir()


def test_a_trace_file_past_the_largest_is_refused_before_it_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`spotrun simulate --trace /dev/zero` read until memory ran out (a MemoryError traceback, or the OOM killer)."""
    from spotrun import traces

    monkeypatch.setattr(traces, "MAX_TRACE_CHARS", 60)
    fits = tmp_path / "fits.json"
    fits.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}))
    assert len(load_trace(fits)) == 3
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 30}))
    with pytest.raises(TraceError, match="holds more than 60 characters; a trace file may hold at most that many") \
            as raised:
        load_trace(big)
    assert str(big) in str(raised.value)
