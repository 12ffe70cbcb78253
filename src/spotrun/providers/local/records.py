"""The local cloud's own bookkeeping on disk: one folder per instance, written atomically under file locks.

Layout under the cloud's root::

    registry.lock                  held while launching (client-token idempotency, quota)
    market.json                    the market every VM and the provider replay (see market.py)
    instances/<id>/instance.json   the record (InstanceRecord)
    instances/<id>/instance.lock   held for every read-modify-write of instance.json
    instances/<id>/vm.lock         held by the VM process for its whole life, from before it starts (see provider.py)
    instances/<id>/user-data.json  the boot command (may hold secrets: mode 0600)
    instances/<id>/processes.json  [[pid, create_time], ...] of the instance's processes, kept by the VM
    instances/<id>/requests/       terminate / preempt requests for the VM
    instances/<id>/disk/           the scratch disk, deleted with the instance
    instances/<id>/metadata/       what the metadata service answers (spot/instance-action on a notice)
    instances/<id>/console.log     the VM process's stdout and stderr
    instances/.<id>.unfinished/    an instance being made, renamed to <id> once its record is in it
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

TERMINATE_REQUEST = "terminate"  # file names under requests/
PREEMPT_REQUEST = "preempt.json"

RecordState = Literal["pending", "running", "terminated"]


class RecordError(Exception):
    """An instance record that is missing or cannot be read."""


class InstanceRecord(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    id: str
    zone: str
    market: Literal["spot", "on-demand"]
    instance_type: str = Field(alias="type")
    client_token: str
    state: RecordState = "pending"
    pid: int | None = None  # the VM process
    pid_started_at: float | None = None  # its psutil create_time, to tell it from a reused pid
    launched_at: float
    terminated_at: float | None = None
    reclaimed: bool = False
    address: str | None = None
    notice_at: float | None = None
    reclaim_at: float | None = None
    boot_exit_code: int | None = None
    reason: str | None = None  # why it terminated
    shutdown_grace_seconds: float = 1.0


@dataclass(frozen=True)
class InstanceDir:
    path: Path

    @property
    def instance_id(self) -> str:
        return self.path.name

    @property
    def root(self) -> Path:
        """The cloud's root folder (<root>/instances/<id>)."""
        return self.path.parent.parent

    @property
    def record_file(self) -> Path:
        return self.path / "instance.json"

    @property
    def lock_file(self) -> Path:
        return self.path / "instance.lock"

    @property
    def vm_lock_file(self) -> Path:
        return self.path / "vm.lock"

    @property
    def user_data_file(self) -> Path:
        return self.path / "user-data.json"

    @property
    def processes_file(self) -> Path:
        return self.path / "processes.json"

    @property
    def requests(self) -> Path:
        return self.path / "requests"

    @property
    def disk(self) -> Path:
        return self.path / "disk"

    @property
    def metadata(self) -> Path:
        return self.path / "metadata"

    @property
    def instance_action_file(self) -> Path:
        return self.metadata / "spot" / "instance-action"

    @property
    def console_log(self) -> Path:
        return self.path / "console.log"

    def remove_disk(self) -> None:
        """Delete the scratch disk, even folders its processes made read-only."""

        def make_writable_and_retry(function, path, _excinfo):  # type: ignore[no-untyped-def]
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)

        if self.disk.exists():
            shutil.rmtree(self.disk, onerror=make_writable_and_retry)

    def read(self) -> InstanceRecord:
        try:
            return InstanceRecord.model_validate_json(self.record_file.read_bytes())
        except FileNotFoundError:
            raise RecordError(f"instance {self.instance_id}: no record at {self.record_file}") from None
        except (OSError, ValidationError) as error:
            raise RecordError(f"instance {self.instance_id}: unreadable record ({error})") from None

    def write(self, record: InstanceRecord) -> None:
        write_json_atomic(self.record_file, record.model_dump(mode="json", by_alias=True))

    @contextmanager
    def locked(self) -> Iterator[None]:
        with file_lock(self.lock_file):
            yield

    def update(self, **changes: Any) -> InstanceRecord:
        """Read-modify-write the record under the instance lock; returns the new record."""
        with self.locked():
            record = self.read().model_copy(update=changes)
            self.write(record)
            return record


def instances_dir(root: Path) -> Path:
    return root / "instances"


def instance_dir(root: Path, instance_id: str) -> InstanceDir:
    return InstanceDir(instances_dir(root) / instance_id)


def unfinished_dir(root: Path, instance_id: str) -> InstanceDir:
    """Where a launch makes the instance's folder before renaming it to `instance_dir` (hidden: not an instance)."""
    return InstanceDir(instances_dir(root) / f".{instance_id}.unfinished")


def all_instance_dirs(root: Path) -> list[InstanceDir]:
    folder = instances_dir(root)
    if not folder.is_dir():
        return []
    return [InstanceDir(path) for path in sorted(folder.iterdir()) if path.is_dir() and not path.name.startswith(".")]


def discard_unfinished(root: Path) -> None:
    """Delete the folders of launches whose launcher died before renaming them into place; call under the registry
    lock, which every launch holds while it makes one (so none found here is still being made)."""
    folder = instances_dir(root)
    if folder.is_dir():
        for path in folder.glob(".*.unfinished"):
            shutil.rmtree(path, ignore_errors=True)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive fcntl lock on `path` (created if needed); released when the block ends or the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_json_atomic(path: Path, document: Any, mode: int = 0o644) -> None:
    """Write aside, fsync, then rename over `path`: readers see the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(document, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
