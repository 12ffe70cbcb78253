"""The Checkpointer: periodic non-blocking saves, a durable save on preemption, exact restore.

Step convention: ``step(state, step)`` and ``save(state, step)`` take the 0-based index of the training
step that has just finished; the checkpoint then holds the state after ``step + 1`` steps and is named
``ckpt-<step + 1>``. ``restore`` returns that count, i.e. the index of the next step to run (None when
there is no checkpoint), so ``for step in range(ckpt.restore(state) or 0, total)`` resumes exactly. Steps count the
whole run: one behind those restored or saved is refused (ValueError), as its save would remove the newer checkpoints.

Saving: the training thread only copies the state to host memory; a background thread serializes,
writes, checksums and commits it. At most one save is in flight: a periodic save that falls due while one
is still being written is deferred to the first step after it finishes; ``save`` (and the save on
preemption) waits for the one in flight and then writes synchronously.

Distributed (torchrun, DDP): rank 0 writes the replicated state (model, optimizer, scheduler, scaler,
sampler, user values) to ``shared.pt``; every rank writes its own per-rank state (its RNG states) to
``rank-<rank:05d>.pt``, all into the same folder, so the location must be storage every rank sees (a
shared disk or an object store). Rank 0 commits (manifest) only after every rank has reported its files
written, and every rank's save returns only after the commit. The stop flag and the decision to save are
agreed each step (all_reduce MAX), so all ranks save and stop at the same step. Every rank must create its
Checkpointer in the same order and call ``step``/``save``/``restore`` at the same steps.

Sharded state (FSDP2's ``fully_shard``, tensor parallelism: DTensors anywhere in the state) is saved in pieces:
each rank writes its piece of every DTensor to ``shards-<rank:05d>.pt`` and rank 0 an index of them; a restore
reads the pieces the live layout needs, so a checkpoint loads into another number of ranks, or into a plain
model in one process (see ``sharding``).
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec
import torch

from spotrun.sdk import distributed, layout, reading, replicas, sharding, tensorfile
from spotrun.sdk.errors import (
    CheckpointError, CheckpointWarning, IncompatibleCheckpoint, PrunedMeanwhile, no_valid_checkpoint,
)
from spotrun.sdk.preemption import DEFAULT_SIGNALS, PreemptionFlag, exit_preempted, preemption_flag
from spotrun.sdk.reading import SHARED_FILE, rank_file
from spotrun.sdk.schedule import DEFAULT_EVERY_SECONDS, check_schedule
from spotrun.sdk.snapshot import SnapshotCopies
from spotrun.sdk.state import TrainingState
from spotrun.sdk.storage import LocalStore, checkpoint_location, open_store

log = logging.getLogger(__name__)

READ_RETRY_PAUSE_SECONDS = 1.0  # before a second read of a checkpoint whose first failed in the I/O



@dataclass(frozen=True)
class _Snapshot:
    steps_done: int
    started: float  # time.monotonic() when the save began (the state was taken)
    shared: dict[str, Any] | None  # rank 0 only
    own: dict[str, Any]
    pieces: dict[sharding.Path, torch.Tensor]  # this rank's pieces of sharded tensors, and replicated ones it writes
    boxes: list[tuple[sharding.Path, tuple[int, ...], tuple[int, ...]]]  # where each DTensor piece sits in its tensor
    replicated: list[sharding.Path]  # the whole replicated tensors among the pieces (see ``replicas``)
    others: dict[sharding.Path, torch.Tensor]  # rank 0: its copies of the replicated tensors other ranks write
    copies: SnapshotCopies  # the writer waits on it for each storage's copy


class Checkpointer:
    """Saves and restores a ``TrainingState`` under ``location`` (a path or fsspec URL).

    ``location`` defaults to ``$SPOTRUN_CHECKPOINT_DIR``, else ``./checkpoints``. Periodic saves happen
    every ``every_steps`` steps and/or ``every_seconds`` seconds (default: every 300 s when neither is
    given). ``keep_last`` committed checkpoints are kept (None keeps all). The ``signals`` (SIGTERM and
    SIGUSR1 by default) only set the preemption flag. ``storage_options`` go to fsspec (e.g.
    ``{"client_kwargs": {"endpoint_url": ...}}`` for s3://); ``fs`` replaces the filesystem altogether.
    ``total_steps``, the steps the whole run takes, is written into every manifest, so that the platform
    knows the run's progress (steps done / total) and its placement policy plans with it. With several ranks,
    ``spread_writes`` deals the large tensors of the replicated state out among them to write (see ``replicas``);
    by default it does on an object store (each node uploads its share) and not on a local or mounted disk.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = 2,
        signals: Iterable[int] = DEFAULT_SIGNALS,
        storage_options: dict[str, Any] | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
        flag: PreemptionFlag = preemption_flag,
        total_steps: int | None = None,
        spread_writes: bool | None = None,
    ) -> None:
        if total_steps is not None and (isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1):
            raise ValueError(f"total_steps must be a whole number of at least 1, got {total_steps!r}")
        check_schedule(every_seconds=every_seconds, keep_last=keep_last, every_steps=every_steps)
        if every_steps is None and every_seconds is None:
            every_seconds = DEFAULT_EVERY_SECONDS
        self.store = open_store(checkpoint_location(location), storage_options, fs)
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.keep_last = keep_last
        self.total_steps = total_steps
        # by default only where one rank's upload would be the bottleneck, not on a disk the ranks share
        self.spread_writes = spread_writes if spread_writes is not None else not isinstance(self.store, LocalStore)
        self._flag = flag
        self._signals = tuple(signals)
        self._install_signals(self._signals)
        self._ranks = distributed.current()
        self._reader = reading.Reader(self.store, self._ranks.rank)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spotrun-checkpoint")
        self._inflight: Future[None] | None = None
        self._previous: _Snapshot | None = None
        self._last_saved: int | None = None
        self._newest = 0  # the most steps restored or saved: a step behind them is a slip (``_ahead``)
        self._skipped: set[int] = set()  # the steps of checkpoints restore skipped as damaged
        self._last_save_time = time.monotonic()
        self._deferred = False
        self._stop_held = False  # a stop waiting for the optimizer's step (``step``)
        self._should_stop = False

    # -- public API ---------------------------------------------------------------------------------------

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return self.store.fs

    @property
    def root(self) -> str:
        """The checkpoint folder's path on ``fs`` (no protocol)."""
        return self.store.root

    @property
    def rank(self) -> int:
        return self._ranks.rank

    @property
    def should_stop(self) -> bool:
        """True once a preemption was seen at a step boundary and the final checkpoint is committed."""
        return self._should_stop

    def restore(self, state: TrainingState) -> int | None:
        """Load the newest complete, intact checkpoint into ``state``; the number of steps it holds (the
        index of the next step to run), or None when there is none (folders without a manifest, i.e. saves
        that died half-way, do not count). Corrupt ones are skipped with a CheckpointWarning; one that its writer (in
        another process) prunes while it is read is not damaged, and the newest one there is then is read instead.

        Each rank reads and verifies the files it needs (the shared state, its own, the pieces of sharded
        tensors its layout covers); a checkpoint any rank finds damaged is skipped by all.

        Raises NoValidCheckpoint when checkpoints exist but none verifies, and IncompatibleCheckpoint when
        the chosen one does not fit ``state`` (another model shape, ...); either way ``state`` is unchanged
        and nothing in the folder is deleted."""
        _require_training_state(state)
        self.wait()
        if self.rank == 0:
            self.store.finish_commits()
        candidates = reading.NewestFirst(self._listing)
        rejected: list[str] = []
        for steps_done, path in candidates:
            payload, failure, misfit, pruned = self._load_candidate(path, state)
            failures, misfits, prunes = zip(*self._ranks.exchange((failure, misfit, pruned)), strict=True)
            if any(prunes):  # not damaged, gone: its writer has committed a newer one since the listing
                log.info("%s; restoring the newest checkpoint there is now", pruned or next(filter(None, prunes)))
                candidates.relist()
                continue
            if any(misfits):
                raise IncompatibleCheckpoint(f"{path}: {misfit or next(filter(None, misfits))}")
            if any(failures):
                self._skipped.add(steps_done)
                rejected += [reason for reason in dict.fromkeys(failures) if reason]
                log.warning("skipping checkpoint %s", rejected[-1])
                continue
            for reason in rejected:
                warnings.warn(f"skipping checkpoint {reason}", CheckpointWarning, stacklevel=2)
            self._clean_staging()
            try:
                state.load_state_dict(payload)
            except IncompatibleCheckpoint as error:
                raise type(error)(f"{path}: {error}") from None
            self._last_saved = self._newest = steps_done
            self._last_save_time = time.monotonic()
            log.info("restored checkpoint %s (%d steps done)", path, steps_done)
            return steps_done
        if rejected:
            raise no_valid_checkpoint(self.store.fs.unstrip_protocol(self.root), rejected)
        self._clean_staging()
        return None

    def step(self, state: TrainingState, step: int) -> None:
        """Call after training step ``step`` (0-based) has finished: saves when one is due (in the
        background), and on preemption saves synchronously and sets ``should_stop``. Called after each micro-batch
        of an accumulated step, it holds a save (a stop's too) to the first call after the optimizer's step: a
        checkpoint holds no gradients (``accumulation``)."""
        _require_training_state(state)
        step = self._ahead(_check_step(step))
        steps_done = step + 1
        stop, due, busy, accumulating = self._ranks.agree_any(
            [self._flag.is_set, self._deferred or self._periodic_due(steps_done), self._busy(), state.accumulating()]
        )
        if stop and not accumulating:
            log.warning("preemption requested: saving %d steps and stopping", steps_done)
            try:
                self.wait()
            except CheckpointError as error:  # an earlier save failed: the stop's own may still work, and must be tried
                log.error("the save in flight failed (%s); saving the stop all the same", error)
            self.save(state, step)
            self._should_stop = True
            return
        if accumulating and (stop or due):  # held to the step after the optimizer's: gradients are not saved
            if stop and not self._stop_held:
                log.warning("preemption requested between accumulated micro-batches: saving after the optimizer's step")
            self._stop_held, self._deferred = stop, due
        if not stop:  # a stop held is saved after the optimizer's step, and a failed save in flight told then
            self._raise_failed_save()
        if accumulating:
            return
        if due and busy:
            self._deferred = True
        elif due:
            self._submit(state, steps_done)

    def save(self, state: TrainingState, step: int, *, wait: bool = True) -> None:
        """Save the state after step ``step`` (0-based) now; with ``wait`` (default) return once it is
        committed and durable. A save in flight is finished first; saving the same step again is a no-op."""
        _require_training_state(state)
        step = self._ahead(_check_step(step))
        self.wait()
        if step + 1 != self._last_saved:
            self._submit(state, step + 1)
        if wait:
            self.wait()

    def exit_if_stopped(self) -> None:
        """After a preemption-triggered save: exit with PREEMPTED_EXIT_CODE (75), which means "resume me". In a
        distributed job the SDK's own process groups are destroyed first (`distributed.TorchDistributed.leave`)."""
        if self._should_stop:
            self.wait()
            self.close()  # the writer thread and its collectives are done before the SDK's groups go
            self._ranks.leave()
            exit_preempted(self._signals)

    def wait(self) -> None:
        """Block until the save in flight (if any) is committed; raise CheckpointError if it failed. Older
        checkpoints beyond ``keep_last`` are removed after that, in the writer thread (``close`` waits for it)."""
        if self._inflight is not None:
            self._inflight.exception()  # waits
            self._raise_failed_save()

    def close(self) -> None:
        """Flush the save in flight, stop the writer thread and let another writer have the folder."""
        try:
            self.wait()
        finally:
            self._executor.shutdown(wait=True)
            self._previous = None
            self.store.release()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- saving -------------------------------------------------------------------------------------------

    def _ahead(self, step: int) -> int:
        """``step``, unless it falls behind the steps restored or saved: a loop that starts at 0 instead of at
        ``restore``'s return, or counts steps within each epoch. Its save would prune the newer checkpoints as a
        later timeline (``CheckpointStore.prune``), so it is refused before anything is written."""
        if step + 1 < self._newest:
            raise ValueError(
                f"step {step} comes before the {self._newest} steps this Checkpointer restored or saved: number the "
                "steps of the whole run, going on from restore's return (for step in range(ckpt.restore(state) or 0, "
                "total_steps)); saved, it would remove the newer checkpoints"
            )
        return step

    def _install_signals(self, signals: tuple[int, ...]) -> None:
        if not signals:
            return
        if threading.current_thread() is threading.main_thread():
            self._flag.install(signals)
        else:
            names = ", ".join(signal.Signals(s).name for s in signals)
            warnings.warn(f"Checkpointer created outside the main thread: {names} not handled", stacklevel=3)

    def _periodic_due(self, steps_done: int) -> bool:
        if self.every_steps is not None and steps_done % self.every_steps == 0:
            return True
        return self.every_seconds is not None and time.monotonic() - self._last_save_time >= self.every_seconds

    def _busy(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    def _raise_failed_save(self) -> None:
        if self._inflight is not None and self._inflight.done():
            failed, self._inflight = self._inflight, None
            error = failed.exception()
            if error is not None:
                self._last_saved = None  # that step is not saved: a later save of it must not be skipped
            if isinstance(error, CheckpointError):
                raise error
            if error is not None:
                raise CheckpointError(f"checkpoint save failed: {error!r}") from error

    def _submit(self, state: TrainingState, steps_done: int) -> None:
        """Snapshot the state (the only part of a save that blocks training) and hand it to the writer, which
        starts on each storage as soon as its copy is done. The previous snapshot, written by now, lends its
        host memory: between saves the Checkpointer holds one host copy of the state, and a save needs no more
        than that."""
        started = time.monotonic()
        earlier = self._previous if not self._busy() else None
        self._previous = None
        own, shared = sharding.split(state.state_dict("rank")), sharding.split(state.state_dict("shared"))
        spread = replicas.take_apart(shared.structure, self._spread_plan(shared.structure), self.rank)
        pieces = {path: local for path, (_, local) in (own.pieces | shared.pieces).items()} | spread.mine
        copies = SnapshotCopies()
        snapshot = _Snapshot(  # copied in the order the files are written
            steps_done=steps_done,
            started=started,
            own=copies.snapshot(own.structure, earlier and earlier.own),
            pieces=copies.snapshot(pieces, earlier and earlier.pieces),
            boxes=own.boxes() + shared.boxes(),
            replicated=list(spread.mine),
            shared=copies.snapshot(spread.structure, earlier and earlier.shared) if self.rank == 0 else None,
            others=copies.snapshot(spread.others, earlier and earlier.others),
            copies=copies,
        )
        self._last_saved = steps_done
        self._newest = max(self._newest, steps_done)
        self._last_save_time = time.monotonic()
        self._deferred = False
        self._inflight = self._executor.submit(self._write, snapshot)
        self._inflight.add_done_callback(_log_failure)
        copies.run()  # on failure the writer fails too, and the save is reported as failed
        self._previous = snapshot

    def _spread_plan(self, structure: dict[str, Any]) -> dict[sharding.Path, int]:
        return replicas.plan(structure, self._ranks.world_size) if self.spread_writes and self._ranks.world_size > 1 else {}

    def _write(self, snapshot: _Snapshot) -> None:
        """The save protocol, in the writer thread, on every rank: rank 0 prepares the folder; each rank
        writes its files; rank 0 commits once all have reported; all learn the outcome."""
        steps = snapshot.steps_done
        error = _attempt(self._prepare, steps)[1] if self.rank == 0 else None
        # every rank learns it: a folder rank 0 was refused (another writer's) is no place for their files either
        error = self._ranks.all_gather(error)[0]
        if error is None:
            files, error = _attempt(self._write_own_files, snapshot)
        if error is None:  # the digests of what this rank wrote of the replicated state, or (rank 0) of its copies
            digests, error = _attempt(self._digests, snapshot)
        reports = self._ranks.all_gather(error or (files, snapshot.boxes, digests))
        errors = [report for report in reports if isinstance(report, str)]
        if self.rank == 0 and not errors:
            failed_commit = _attempt(self._commit_reported, snapshot, reports)[1]
            errors += [failed_commit] if failed_commit else []
        outcome = self._ranks.all_gather(errors if self.rank == 0 else None)[0]
        if outcome:
            raise CheckpointError(f"checkpoint of {steps} steps not committed: {'; '.join(dict.fromkeys(outcome))}")
        log.debug("committed %s", self.store.path(steps))

    def _prepare(self, steps: int) -> str:
        """Rank 0: the staging folder of ``steps``, once this Checkpointer is the folder's one writer (``writerlock``)."""
        self.store.claim()
        return self.store.prepare(steps)

    def _write_own_files(self, snapshot: _Snapshot) -> dict[str, dict[str, Any]]:
        payloads: dict[str, Any] = {rank_file(self.rank): snapshot.own}
        if snapshot.pieces:
            payloads[sharding.shards_file(self.rank)] = snapshot.pieces
        if snapshot.shared is not None:
            payloads[SHARED_FILE] = snapshot.shared
        staging = self.store.staging_path(snapshot.steps_done)
        return {
            name: self.store.write_payload(
                staging, name, functools.partial(tensorfile.write, payload, wait_for=snapshot.copies.wait_for)
            )
            for name, payload in payloads.items()
        }

    def _digests(self, snapshot: _Snapshot) -> dict[sharding.Path, str]:
        tensors = snapshot.others if self.rank == 0 else {path: snapshot.pieces[path] for path in snapshot.replicated}
        for tensor in tensors.values():
            snapshot.copies.wait_for(tensor.untyped_storage())
        return {path: replicas.digest(tensor) for path, tensor in tensors.items()}

    def _commit_reported(self, snapshot: _Snapshot, reports: list[tuple[dict[str, Any], list, dict]]) -> None:
        """Rank 0: the index of the pieces, then the manifest of every file, and the commit. The manifest says how
        long the save took (``save_seconds``: from taking the state to the last file written), which the agent
        weighs against the time a preemption notice leaves."""
        steps, staging = snapshot.steps_done, self.store.staging_path(snapshot.steps_done)
        listed = {name: entry for files, _, _ in reports for name, entry in files.items()}
        index = sharding.build_index(
            [(sharding.shards_file(rank), boxes) for rank, (_, boxes, _) in enumerate(reports) if boxes]
        )
        index |= self._replicas_index(snapshot, reports, listed)
        if index:
            listed[sharding.INDEX_FILE] = self.store.write_payload(
                staging, sharding.INDEX_FILE, functools.partial(tensorfile.write, index)
            )
        progress = {} if self.total_steps is None else {"total_steps": self.total_steps}
        manifest = layout.build_manifest(
            steps, listed, world_size=self._ranks.world_size, created=time.time(),
            save_seconds=round(time.monotonic() - snapshot.started, 3), **progress,
        )
        self._commit(steps, manifest)

    def _replicas_index(self, snapshot: _Snapshot, reports: list[tuple[dict[str, Any], list, dict]],
                        listed: dict[str, Any]) -> dict[sharding.Path, list]:
        """Rank 0: where each replicated tensor other ranks were to write is, with rank 0's values: in their shards
        file where their digest matches rank 0's, else in ``replicas.FALLBACK_FILE``, which rank 0 writes now (its
        manifest entry added to ``listed``)."""
        # rank 0's copies share a storage where the state's tensors did (``snapshot``)
        ties = [[path for path, _ in members] for members in replicas.by_storage(snapshot.others.items()).values()]
        written, fallback = replicas.settle(
            [(sharding.shards_file(rank), digests) for rank, (_, _, digests) in enumerate(reports)][1:], reports[0][2],
            ties,
        )
        if fallback:
            listed[replicas.FALLBACK_FILE] = self.store.write_payload(
                self.store.staging_path(snapshot.steps_done), replicas.FALLBACK_FILE,
                functools.partial(tensorfile.write, {path: snapshot.others[path] for path in fallback}),
            )
        placed = written | dict.fromkeys(fallback, replicas.FALLBACK_FILE)
        return {path: [(file, (0,) * snapshot.others[path].dim(), tuple(snapshot.others[path].shape))]
                for path, file in placed.items()}

    def _commit(self, steps: int, manifest: dict[str, Any]) -> None:
        """Commit the checkpoint; removing older ones is queued behind it in the writer thread, so that ``wait``
        returns once the new checkpoint is durable, not once a gigabyte of old files is deleted (``close``
        still waits for it)."""
        self.store.commit(self.store.staging_path(steps), steps, manifest)
        self._skipped.discard(steps)  # replaced by this one
        if self.keep_last is not None:
            try:
                self._executor.submit(self._prune_quietly, steps)
            except RuntimeError:  # the writer thread is shutting down: remove them now
                self._prune_quietly(steps)

    def _prune_quietly(self, newest: int) -> None:
        try:
            self._prune(newest)
        except Exception:  # the new checkpoint is committed; old ones linger until the next save
            log.warning("could not remove old checkpoints", exc_info=True)

    def _prune(self, newest: int) -> None:
        assert self.keep_last is not None
        self.store.prune(newest, self.keep_last, skipped=self._skipped)

    # -- restoring ----------------------------------------------------------------------------------------

    def _listing(self) -> list[tuple[int, str]]:
        """The checkpoints there are, oldest first, as rank 0 lists them (every rank calls it)."""
        return self._ranks.broadcast_from_first(self.store.candidates() if self.rank == 0 else None)

    def _load_candidate(
        self, path: str, state: TrainingState
    ) -> tuple[dict[str, Any] | None, str | None, str | None, str | None]:
        """This rank's payload from the checkpoint at ``path``, ready to load into ``state``: (payload, None, None,
        None); (None, why it is unreadable, None, None) for a damaged checkpoint, whatever the damage; (None, None, why
        it does not fit, None) when its sharded tensors do not fit ``state``; (None, None, None, that it was pruned)
        when it was removed while it was read."""
        for last_try in (False, True):
            try:
                return self._reader.payload(path, state.state_dict("all"), state.components), None, None, None
            except PrunedMeanwhile as error:
                return None, None, None, str(error)
            except IncompatibleCheckpoint as error:
                return None, None, str(error), None
            except Exception as error:  # any unreadable checkpoint is skipped, whatever the damage
                if last_try or not _maybe_transient(error):
                    return None, reading.reason(path, error), None, None
                log.warning("reading %s failed (%s); trying it once more", path, error)
                time.sleep(READ_RETRY_PAUSE_SECONDS)
        raise AssertionError("unreachable")

    def _clean_staging(self) -> None:
        if self.rank == 0:
            self.store.clean_staging()


def _maybe_transient(error: BaseException) -> bool:
    """A read that failed in the I/O itself (EIO, a connection reset), not in what it read: worth one more try
    before the checkpoint is skipped, as a skipped newer one is removed by the next save's pruning."""
    while error is not None:
        if isinstance(error, OSError):
            return not isinstance(error, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError))
        error = error.__cause__  # type: ignore[assignment]
    return False


def _check_step(step: object) -> int:
    """``step`` as a plain int, the 0-based index of a finished step (-1: none yet, a checkpoint of 0 steps); else
    ValueError. A NumPy integer or a 0-d tensor passes as an index, but would reach the manifest's JSON as it is."""
    try:
        index = None if isinstance(step, bool) else operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        index = None
    if index is None or index < -1:
        raise ValueError(f"step must be the 0-based index of the step just finished (-1 or more), got {step!r}")
    return index


def _require_training_state(state: object) -> None:
    if not isinstance(state, TrainingState):
        raise TypeError(
            f"expected the TrainingState from spotrun.torch_state(...), got {type(state).__name__}"
        )


def _attempt(action: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    """``action(*args)`` as (result, None), or (None, its failure as a message): the ranks exchange
    messages, not exceptions."""
    try:
        return action(*args), None
    except Exception as error:
        log.exception("checkpoint save failed in %s", getattr(action, "__name__", action))
        return None, f"{type(error).__name__}: {error}"


def _log_failure(future: Future[None]) -> None:
    if future.exception() is not None:
        log.error("checkpoint save failed: %s", future.exception())
