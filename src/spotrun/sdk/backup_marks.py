"""Which attempt backed a job's checkpoints up to its store, and when: the agent's mark, read by the controller.

After each backup that wrote something to the store, the agent rewrites one small file for its attempt,
``.spotrun-backups/job-<job>-attempt-<attempt>.json``. The store's own write time of that file is the newest backup
the attempt's instance made: the controller bills an instance gone without a stated end at least to it, as it ran
until then even where no heartbeat reached the controller. The folder's name is hidden, so restores and the
``spotrun checkpoints`` listing leave it alone, and stores written before marks existed read as they did.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import fsspec

MARKS_FOLDER = ".spotrun-backups"
# where fsspec's filesystems put an object's write time in `info()`: local and gcsfs "mtime", s3fs "LastModified",
# adlfs "last_modified"; a creation time is the last resort (an object rewritten in place keeps its first one)
_WRITE_TIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "created", "ctime", "creation_time")


@dataclass(frozen=True)
class BackupWriter:
    """The attempt whose agent backs the job's checkpoints up."""

    job_id: int
    attempt_id: int

    def mark_path(self, store_root: str) -> str:
        return f"{store_root.rstrip('/')}/{MARKS_FOLDER}/job-{self.job_id}-attempt-{self.attempt_id}.json"


def write_mark(fs: fsspec.AbstractFileSystem, store_root: str, writer: BackupWriter, written_at: float) -> None:
    """The writer's mark, (re)written now. `written_at`: the agent's clock, for people reading the store; the
    controller goes by the store's time of the write."""
    path = writer.mark_path(store_root)
    body = json.dumps({"job_id": writer.job_id, "attempt_id": writer.attempt_id, "written_at": written_at}).encode()
    try:
        fs.pipe_file(path, body)
    except FileNotFoundError:  # the first mark in this store (a folder on a disk); not asked at every backup
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.pipe_file(path, body)


def mark_written_at(fs: fsspec.AbstractFileSystem, store_root: str, writer: BackupWriter) -> float | None:
    """The store's time (unix seconds) of the writer's newest mark; None when it wrote none, or the store tells no
    time for it. A store that cannot be read raises (`fs.info`'s error)."""
    path = writer.mark_path(store_root)
    fs.invalidate_cache(path.rsplit("/", 1)[0])  # a cached listing would hide a mark written since
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return None
    return write_time(info)


def write_time(info: dict[str, Any]) -> float | None:
    """An fsspec `info()` entry's write time in unix seconds, or None where it has none."""
    for key in _WRITE_TIME_KEYS:
        seconds = _unix_seconds(info.get(key))
        if seconds is not None:
            return seconds
    return None


def _unix_seconds(value: Any) -> float | None:
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime):
        # a time without a zone is taken for UTC, as object stores state theirs
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None
