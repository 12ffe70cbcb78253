"""Attempt logs as files under $SPOTRUN_HOME/logs, appended by offset so that agent retries are harmless."""

from __future__ import annotations

import threading
from pathlib import Path

from spotrun import config

_lock = threading.Lock()


class LogGap(ValueError):
    """A chunk starts past the end of what is stored: an earlier chunk is missing."""


def attempt_log_path(job_id: int, attempt_number: int, root: Path | None = None) -> Path:
    return (root or config.logs_dir()) / f"job-{job_id}" / f"attempt-{attempt_number:03d}.log"


def append_chunk(path: Path, offset: int, data: bytes) -> int:
    """Write data at offset unless already stored; returns the log's size after. Raises LogGap on a hole."""
    with _lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        size = path.stat().st_size if path.exists() else 0
        if offset > size:
            raise LogGap(f"chunk at offset {offset} but only {size} bytes stored")
        if offset + len(data) <= size:
            return size  # a retry of a chunk we already have
        with open(path, "ab") as fh:
            fh.write(data[size - offset :])
        return offset + len(data)
