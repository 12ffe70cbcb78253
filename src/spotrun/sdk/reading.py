"""Reading one Checkpointer checkpoint for one rank: the shared state, the rank's own, and the pieces of sharded
tensors it needs (see ``sharding``), every file checked against the manifest as it is read.

Used by ``Checkpointer.restore`` (each rank, for its live state) and by ``load_checkpoint`` (one process, whole
tensors: the weights out of a checkpoint, for evaluation or export).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

from spotrun.sdk import layout, sharding
from spotrun.sdk.errors import (
    CheckpointError, CheckpointWarning, MissingComponents, NoValidCheckpoint, PrunedMeanwhile, no_valid_checkpoint,
    only_foreign_checkpoints,
)
from spotrun.sdk.locations import url_to_fs
from spotrun.sdk.storage import CHECKPOINT_DIR_ENV, CheckpointStore, open_store


SHARED_FILE = layout.SHARED_FILE
log = logging.getLogger(__name__)


def rank_file(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


@dataclass(frozen=True)
class Reader:
    """Reads the checkpoints of ``store`` as rank ``rank``."""

    store: CheckpointStore
    rank: int = 0

    def payload(
        self, path: str, live: Mapping[str, Any], components: Mapping[str, Any], only: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """The components of the checkpoint at ``path`` (``only`` those named, when given), ready to load into the
        live state ``live`` (a state dict per component; ``components``: the objects behind it). Raises
        IncompatibleCheckpoint when sharded tensors do not fit ``live`` (before any piece is read), PrunedMeanwhile
        when the checkpoint was removed while it was read, and any other exception for a damaged checkpoint. Every
        file is checked against the one manifest read first: what it returns is never a mix of two checkpoints."""
        with pruned_told_apart(self.store.fs, path):
            return self._payload(path, live, components, only)

    def _payload(
        self, path: str, live: Mapping[str, Any], components: Mapping[str, Any], only: Iterable[str] | None
    ) -> dict[str, Any]:
        try:
            manifest = layout.read_manifest(self.store.fs, path, io_errors=True)
        except OSError as error:  # kept as the cause: restore tries a read that failed in the I/O once more
            raise layout.unreadable(path, layout.MANIFEST_NAME, error) from error
        if manifest is None:
            raise layout.CorruptCheckpoint(f"{path}: no readable {layout.MANIFEST_NAME}")
        layout.check_inside(path, manifest["files"])  # every file listed, not only those read here, as `verify_files`
        foreign = layout.FRAMEWORK_PAYLOADS.get(manifest.get("payload"))  # type: ignore[arg-type]
        if foreign is not None:
            raise layout.ForeignCheckpoint(
                f"{path}: a {manifest['payload']} checkpoint ({foreign}), not the Checkpointer's: load it with that framework"
            )
        own = rank_file(self.rank)
        names = [SHARED_FILE] + ([own] if own in manifest["files"] else [])  # no own file: saved by fewer ranks
        files = self.store.load_verified(path, names, manifest)
        payload = {name: value for file in names for name, value in _components(path, file, files[file]).items()}
        if only is not None:
            wanted = set(only)
            missing = sorted(wanted - payload.keys())
            if missing:
                raise MissingComponents(f"{path}: no component {', '.join(map(repr, missing))}; it holds {sorted(payload)}")
            payload = {name: value for name, value in payload.items() if name in wanted}
        assembly = sharding.Assembly(payload, live, components)
        if not assembly.needed:
            return payload
        load = functools.partial(self._load_one, path, manifest)
        index = load(sharding.INDEX_FILE) if assembly.reads_pieces else {}
        if not isinstance(index, dict):
            raise layout.CorruptCheckpoint(f"{path}: {sharding.INDEX_FILE} holds a {type(index).__name__}")
        return assembly.fill(assembly.plan(index), load)

    def _load_one(self, path: str, manifest: dict[str, Any], name: str) -> Any:
        return self.store.load_verified(path, [name], manifest)[name]


@contextlib.contextmanager
def pruned_told_apart(fs: fsspec.AbstractFileSystem, path: str) -> Iterator[None]:
    """Reading (or verifying) the checkpoint at ``path`` within: a failure raises PrunedMeanwhile in its place when the
    checkpoint is gone (its writer pruned it meanwhile), not damaged. A CheckpointError passes as it is: it is about
    what the checkpoint holds, read whole."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:
        if layout.removed(fs, path):
            raise PrunedMeanwhile(f"{path} was pruned by its writer while it was read") from error
        raise


def _components(path: str, name: str, payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not all(isinstance(key, str) for key in payload):
        raise layout.CorruptCheckpoint(f"{path}: {name} holds a {type(payload).__name__}, not named components")
    return payload


def reason(path: str, error: Exception) -> str:
    """``path: what is wrong with it``, for any failure to read a checkpoint."""
    message = str(error)
    if isinstance(error, layout.CorruptCheckpoint) and message.startswith(path):
        return message
    return f"{path}: {type(error).__name__}: {message}"


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint read whole: its step count, where it is, and its components' state (sharded tensors whole)."""

    steps: int
    path: str
    state: dict[str, Any]


def load_checkpoint(
    location: str | os.PathLike[str] | None = None,
    *,
    step: int | None = None,
    components: Iterable[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LoadedCheckpoint:
    """The newest intact Checkpointer checkpoint at ``location`` (default ``$SPOTRUN_CHECKPOINT_DIR``), or the one
    holding ``step`` steps, read in this process with every sharded tensor put together whole: the weights out of a
    run for evaluation or export, e.g. ``load_checkpoint("s3://bucket/run")``.state["model"]. ``components``: only
    those (the others' pieces in shards files are not read; rank 0's shared file is read whole). Damaged checkpoints
    are skipped with a CheckpointWarning (not when ``step`` names one); one that its writer prunes while it is read
    is not damaged, and the newest one there is then is read (PrunedMeanwhile when ``step`` names it).
    NoValidCheckpoint when none is intact, CheckpointError when there is none."""
    location = os.fspath(location if location is not None else os.environ.get(CHECKPOINT_DIR_ENV, ""))
    if not location:
        raise CheckpointError(f"no checkpoint location: give one, or set {CHECKPOINT_DIR_ENV}")
    fs, root = url_to_fs(location, storage_options)
    if not fs.isdir(root):
        raise CheckpointError(f"{location}: no such checkpoint folder")
    store = open_store(location, storage_options)
    listing = store.candidates if step is None else functools.partial(list, _of_step(store, step, location))
    reader, rejected, candidates, foreign = Reader(store), [], NewestFirst(listing), 0
    for steps, path in candidates:
        try:
            state = reader.payload(path, {}, {}, components)
        except MissingComponents:
            raise
        except PrunedMeanwhile as error:
            if step is not None:
                raise
            log.info("%s; reading the newest checkpoint there is now", error)
            candidates.relist()
            continue
        except Exception as error:  # any unreadable checkpoint is skipped, whatever the damage
            if step is not None:
                raise NoValidCheckpoint(reason(path, error)) from error
            rejected.append(reason(path, error))
            foreign += isinstance(error, layout.ForeignCheckpoint)
            continue
        for why in rejected:
            warnings.warn(f"skipping checkpoint {why}", CheckpointWarning, stacklevel=2)
        return LoadedCheckpoint(steps, store.fs.unstrip_protocol(path), state)
    if rejected and foreign == len(rejected):
        raise only_foreign_checkpoints(store.fs.unstrip_protocol(store.root), rejected)
    if rejected:
        raise no_valid_checkpoint(store.fs.unstrip_protocol(store.root), rejected)
    raise CheckpointError(f"{location}: no checkpoint yet (no folder with a manifest)")


def _of_step(store: CheckpointStore, step: int, location: str) -> list[tuple[int, str]]:
    """The checkpoint of ``step`` steps, listed; CheckpointError naming those there are when there is none."""
    held = store.candidates()
    chosen = [(steps, path) for steps, path in held if steps == step]
    if not chosen:
        listed = ", ".join(str(steps) for steps, _ in held) or "none"
        raise CheckpointError(f"{location}: no checkpoint of {step} steps (it holds: {listed})")
    return chosen


class NewestFirst:
    """The checkpoints ``listing`` gives (oldest first, as ``CheckpointStore.candidates``), to be tried newest first,
    each once. ``relist`` after one was pruned while it was read: its writer has committed a newer one since the
    listing, which then comes next."""

    def __init__(self, listing: Callable[[], list[tuple[int, str]]]) -> None:
        self._listing = listing
        self._tried: set[str] = set()
        self._queue = self._untried()

    def __iter__(self) -> Iterator[tuple[int, str]]:
        while self._queue:
            steps, path = self._queue.pop(0)
            self._tried.add(path)
            yield steps, path

    def relist(self) -> None:
        self._queue = self._untried()

    def _untried(self) -> list[tuple[int, str]]:
        return [(steps, path) for steps, path in reversed(self._listing()) if path not in self._tried]
