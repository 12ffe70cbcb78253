"""A framework's own checkpoint (a 🤗 Trainer's folder, a Lightning ``.ckpt`` file) kept in spotrun's layout.

The framework writes its checkpoint its way, in place and without fsync; spotrun then commits it: every file moved
into a staging folder, fsynced and checksummed, a manifest marked with the framework's ``payload`` written last,
the folder renamed into place as ``ckpt-<step>``. The agent backs it up like any other, and a resume takes the
newest one whose every file matches its manifest.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import warnings
from typing import Any

from spotrun.sdk import layout, reading
from spotrun.sdk.errors import CheckpointWarning, PrunedMeanwhile, no_valid_checkpoint
from spotrun.sdk.storage import LocalStore, checkpoint_location, open_store

log = logging.getLogger(__name__)


def local_store(location: str | os.PathLike[str] | None, framework: str) -> LocalStore:
    """The store at `location`, else $SPOTRUN_CHECKPOINT_DIR, else ./checkpoints; a local folder, since the
    framework reads its checkpoint from a path (the agent backs the folder up)."""
    store = open_store(checkpoint_location(location))
    if not isinstance(store, LocalStore):
        raise ValueError(f"{store!r}: {framework} resumes from a local folder; give a local path (the agent backs it up)")
    return store


def commit(
    store: LocalStore, folder: str, steps: int, *, payload: str, total_steps: int | None = None, move: bool = True,
    started: float | None = None,
) -> str:
    """Commit the framework's checkpoint ``folder`` as ``ckpt-<steps>``: every file moved (or copied) into staging,
    fsynced and checksummed, the manifest written last, the staging folder renamed into place. The path.
    ``started``: time.monotonic() when the framework began to write it, for the manifest's ``save_seconds``.
    ``store`` is claimed first, as a Checkpointer's first save claims it (``writerlock``): CheckpointError, nothing
    moved, while another writer holds the folder; the caller releases it at the end of training."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no checkpoint was written at {folder}")
    store.claim()
    staging = store.prepare(steps)
    files = {}
    for name in _files_under(folder):
        target = os.path.join(staging, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        (shutil.move if move else shutil.copy2)(os.path.join(folder, name), target)
        files[name] = _describe_and_sync(target)
    progress = {} if total_steps is None else {"total_steps": total_steps}
    if started is not None:
        progress["save_seconds"] = round(time.monotonic() - started, 3)
    manifest = layout.build_manifest(steps, files, created=time.time(), payload=payload, **progress)
    store.commit(staging, steps, manifest)
    if move:
        shutil.rmtree(folder, ignore_errors=True)
    return store.path(steps)


def newest_intact(store: LocalStore, payload: str, framework: str, skipped: set[int] | None = None) -> str | None:
    """The folder of the newest checkpoint of `payload` whose every file matches its manifest; None when there is
    none. A damaged one is skipped with a CheckpointWarning, and its step added to `skipped` (which pruning then
    does not count as kept: ``CheckpointStore.prune``); one that its writer prunes while it is checked is not damaged,
    and the newest one there is then is checked instead. NoValidCheckpoint (nothing loaded or deleted) when there are
    some and none is intact."""
    rejected = []
    store.finish_commits()  # a save cut short between its renames is complete: a candidate too
    candidates = reading.NewestFirst(store.candidates)
    for steps, path in candidates:
        try:
            verify(store, path, payload, framework)
        except PrunedMeanwhile as error:  # its writer has committed a newer one since the listing
            log.info("%s; resuming from the newest checkpoint there is now", error)
            candidates.relist()
            continue
        except layout.CorruptCheckpoint as error:
            rejected.append(str(error))
            if skipped is not None:
                skipped.add(steps)
            continue
        for reason in rejected:
            warnings.warn(f"skipping checkpoint {reason}", CheckpointWarning, stacklevel=3)
        store.clean_staging()
        log.info("resuming from %s (%d steps done)", path, steps)
        return path
    if rejected:
        raise no_valid_checkpoint(store.root, rejected)
    return None


def verify(store: LocalStore, path: str, payload: str, framework: str) -> None:
    """CorruptCheckpoint unless the folder is a checkpoint of `payload` whose every listed file matches the
    manifest; PrunedMeanwhile when it was removed while it was checked."""
    with reading.pruned_told_apart(store.fs, path):
        _verify(store, path, payload, framework)


def _verify(store: LocalStore, path: str, payload: str, framework: str) -> None:
    manifest = layout.read_manifest(store.fs, path)
    if manifest is None:
        raise layout.CorruptCheckpoint(f"{path}: no readable {layout.MANIFEST_NAME}")
    if manifest.get("payload") != payload:
        saved_by = manifest.get("payload") or "spotrun.Checkpointer"
        raise layout.CorruptCheckpoint(f"{path}: not a {framework} checkpoint (saved by {saved_by})")
    layout.verify_files(store.fs, path)


def _files_under(folder: str) -> list[str]:
    names = []
    for parent, _, files in os.walk(folder):
        names += [os.path.relpath(os.path.join(parent, file), folder).replace(os.sep, "/") for file in files]
    return sorted(names)


def _describe_and_sync(path: str) -> dict[str, Any]:
    """The manifest entry of a file moved into staging, once it is on the disk."""
    with open(path, "rb") as fh:
        described = layout.describe_file(fh)
        os.fsync(fh.fileno())
    return described
