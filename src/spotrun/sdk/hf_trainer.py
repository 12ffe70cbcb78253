"""A 🤗 Transformers ``Trainer`` run made reentrant: its checkpoints kept crash-safe in spotrun's layout, one saved
and the run stopped at the step a preemption notice arrives, and the next attempt resumed from the newest intact
one.

```python
import spotrun

spot = spotrun.TrainerCheckpoints()                  # $SPOTRUN_CHECKPOINT_DIR, else ./checkpoints
trainer = Trainer(model, args, train_dataset=data, callbacks=[spot])
trainer.train(resume_from_checkpoint=spot.resume_from())   # None: nothing saved yet, start afresh
spot.exit_if_stopped()                               # after a notice: saved, exit 75 ("resume me")
```

The Trainer writes its checkpoint (weights, optimizer, scheduler, RNG states, its own state) into
``args.output_dir/checkpoint-<step>/`` without fsync, in place: a save killed half-way leaves a folder the Trainer
would resume from. So each one, once written (``on_save``), is committed into the store as spotrun's checkpoints are
(``layout``): the files moved to a staging folder, checksummed and fsynced, a manifest written last and the folder
renamed into place as ``ckpt-<step>``; the agent then backs it up with the others. ``resume_from`` verifies every
file of the newest one against its manifest and falls back past a damaged one. The Trainer restores the RNG states
and skips the batches of the epoch already trained, so a run resumes exactly, except where fetching a batch draws
random numbers (augmentation in ``__getitem__``, a masking collator such as ``DataCollatorForLanguageModeling``):
resuming mid-epoch, the Trainer restores the RNGs only after it has fetched the first batches, so those draws differ
(a transformers limitation; resumes at an epoch's start are exact, a collator with a generator of its own, as
``DataCollatorForLanguageModeling(seed=...)``, included: its state is saved with the checkpoint, ``hf_collator``).
Such a resume warns (``CheckpointWarning``)
where the collator is one of transformers' masking ones (``DataCollatorForLanguageModeling`` with ``mlm``,
``DataCollatorForPermutationLanguageModeling``); draws in a dataset's ``__getitem__`` or in a collator of one's own
cannot be seen from here, and go unwarned. With ``dataloader_persistent_workers``, such a collator masks in worker
processes whose random state carries on from one epoch to the next and is in no checkpoint: a resume restarts it,
so no resume is exact, even at an epoch's start; a ``CheckpointWarning`` says so once, at the start of training
(workers started at each epoch, the default, are seeded from the restored RNGs). A save asked at an epoch's last
step is made after the epoch's evaluation (``eval_strategy="epoch"``), which draws from the RNGs the checkpoint
holds; at a notice, also before it. With ``load_best_model_at_end``, the best checkpoint is kept in the store
besides the ``keep_last`` newest, and a resume on another machine finds it there.

The main process is the folder's one writer from its first commit to the end of training, as a Checkpointer is
(``writerlock``): another run saving to the same folder is refused at its first save (CheckpointError). A
``train`` that raises gives no callback its end: the folder stays held until the callback is collected or the
process exits.

Saves happen when the Trainer's own ``save_strategy`` asks, every ``every_seconds`` (default 300), and at a
preemption signal (SIGTERM, SIGUSR1), which also stops training at the end of the step.

Under torchrun every rank agrees each step whether to save or stop (one all_reduce), waits for the others' files
before the main process commits, and learns whether the commit worked. Several nodes need ``output_dir`` and the
checkpoint folder on one shared filesystem (each rank writes its RNG state there); a commit that lacks a rank's
file says so. Not solved: on CPU (gloo), a run whose Trainer makes one collective per step of its own, this
callback's or any other, has aborted a rank in the interpreter's exit after training ended (SIGABRT; 4 of 10
runs of a bare Trainer with one all_reduce per step, 3 of 10 with this callback), which the agent then reads as
a failed command; the exit at a preemption avoids it (``exit_if_stopped``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
import warnings
from collections.abc import Iterable
from typing import Any

from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorForPermutationLanguageModeling,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from spotrun.sdk import distributed, foreign, hf_collator, layout
from spotrun.sdk.schedule import DEFAULT_EVERY_SECONDS, check_schedule
from spotrun.sdk.errors import CheckpointError, CheckpointWarning
from spotrun.sdk.preemption import DEFAULT_SIGNALS, PreemptionFlag, exit_preempted, preemption_flag

log = logging.getLogger(__name__)

PAYLOAD = layout.TRAINER_PAYLOAD  # the manifest's mark of a Trainer checkpoint (Checkpointer's have none)
FRAMEWORK = "Trainer"


class TrainerCheckpoints(TrainerCallback):
    """A ``TrainerCallback`` that keeps the Trainer's checkpoints in spotrun's store (a local folder: the agent
    backs it up) and stops training at a preemption signal, after a save. ``keep_last`` committed checkpoints are
    kept; ``every_seconds`` (None: only the Trainer's own schedule) adds saves by wall time, which is what a
    preemption costs."""

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        every_seconds: float | None = DEFAULT_EVERY_SECONDS,
        keep_last: int | None = 2,
        signals: Iterable[int] = DEFAULT_SIGNALS,
        flag: PreemptionFlag = preemption_flag,
    ) -> None:
        check_schedule(every_seconds=every_seconds, keep_last=keep_last)
        self.store = foreign.local_store(location, FRAMEWORK)
        self.every_seconds = every_seconds
        self.keep_last = keep_last
        self._signals = tuple(signals)
        self._flag = flag
        if self._signals and threading.current_thread() is threading.main_thread():
            flag.install(self._signals)
        self._last_save = time.monotonic()
        self._ranks: distributed.SingleProcess | distributed.TorchDistributed = distributed.SingleProcess()
        self._resumed: str | None = None  # the checkpoint resume_from gave
        self._collator: Any = None  # the training DataLoader's, whose own generator (if any) each save keeps
        self._skipped: set[int] = set()  # the steps of checkpoints resume_from skipped as damaged
        self._stopping = False
        self._save_at_epoch_end = False  # a save asked at an epoch's last step, held for the epoch's end
        self.should_stop = False  # True once a preemption stopped training after its checkpoint was committed

    # -- the script's calls ---------------------------------------------------------------------------------

    def resume_from(self) -> str | None:
        """The folder of the newest checkpoint whose every file matches its manifest, for
        ``trainer.train(resume_from_checkpoint=...)``; None when there is none. A damaged one is skipped with a
        CheckpointWarning; one that its writer prunes while it is checked is not damaged, and the newest one there is
        then is taken. NoValidCheckpoint (nothing loaded or deleted) when there are some and none is intact."""
        self._resumed = foreign.newest_intact(self.store, PAYLOAD, FRAMEWORK, self._skipped)
        return self._resumed

    def exit_if_stopped(self) -> None:
        """After training stopped at a preemption signal, its checkpoint committed: exit with PREEMPTED_EXIT_CODE
        (75), which tells the agent "resume me". A second signal can no longer kill the exit half-way. Under
        torch.distributed the process ends at once (`os._exit`, after flushing its output): torn down by the
        interpreter's exit, gloo has aborted a rank (SIGABRT, "terminate called without an active exception") in 3
        of 6 runs here, and in 4 of 8 with the Trainer's process group destroyed first, which the agent reads as a
        failed command; in 0 of 8 with `os._exit`."""
        if not self.should_stop:
            return
        distributed_run = self._ranks.world_size > 1
        self._ranks.leave()
        exit_preempted(self._signals, at_once=distributed_run)

    # -- the Trainer's events -------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, train_dataloader: Any = None,
        **_: Any,
    ) -> None:
        if args.save_only_model:
            raise ValueError(
                "TrainingArguments(save_only_model=True) saves no optimizer, scheduler or RNG state: a preempted run "
                "could not resume exactly; leave it False"
            )
        if str(getattr(args.save_strategy, "value", args.save_strategy)) == "best":
            # at an evaluation step the Trainer sets should_save to whether the metric improved, over the save a
            # notice asked for: the run stopped with nothing saved, and exit_if_stopped let the script go on
            raise ValueError(
                'TrainingArguments(save_strategy="best") saves only when the metric improves, so a preemption at an '
                'evaluation step would save nothing: use "steps" or "epoch" (keep the best with load_best_model_at_end)'
            )
        self._ranks = distributed.current()  # the Trainer has joined the process group by now
        check_one_output_dir(self._ranks, args.output_dir)
        self._last_save = time.monotonic()
        self._collator = hf_collator.collator_of(train_dataloader)
        if self._resumed is not None:
            hf_collator.restore_generator(self._collator, self._resumed, self._ranks.rank)
        if args.load_best_model_at_end and self._resumed is not None:
            self._find_best_in_store(state)
        if self._resumed is not None and not args.ignore_data_skip and not _at_epoch_end(state):
            _warn_of_random_batches(train_dataloader, state.global_step)
        if getattr(train_dataloader, "persistent_workers", False):
            _warn_of_masks_in_persistent_workers(train_dataloader)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        due = self.every_seconds is not None and time.monotonic() - self._last_save >= self.every_seconds
        stop, due = self._ranks.agree_any([self._flag.is_set, due])  # every rank saves and stops at the same step
        if stop:
            log.warning("preemption requested: saving %d steps and stopping", state.global_step)
            self._stopping = True
            control.should_training_stop = True
        if (stop or due) and _at_epoch_end(state):
            # the Trainer evaluates at an epoch's end (eval_strategy="epoch") before its save there, drawing from the
            # RNGs the checkpoint holds: saved only now, the resume (which starts the next epoch) would not have the
            # uninterrupted run's RNG states. So it is saved (again) at the epoch's end; at a notice, now as well,
            # in case the evaluation outlasts the notice
            self._save_at_epoch_end = True
        if stop or (due and not _at_epoch_end(state)):
            control.should_save = True

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        if self._save_at_epoch_end:
            self._save_at_epoch_end = False
            control.should_save = True
        elif self.should_stop:
            # stopped mid-epoch, its checkpoint committed: the Trainer goes on to its epoch's end, where
            # save_strategy="epoch" would save again over it, after an evaluation eval_strategy="epoch" would run
            # (neither is what the uninterrupted run does at this step)
            control.should_save = control.should_evaluate = False

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        self._ranks.leave()  # the callback's own gloo groups, left to the interpreter's exit, can abort it (SIGABRT)
        self.store.release()  # the folder, held since the first commit (``foreign.commit``), is free for another run

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any) -> None:
        """The Trainer has written ``checkpoint-<step>``: the main process commits it as ``ckpt-<step>``, once every
        rank has written its own files into it (and its collator's generator state: ``hf_collator``); every rank
        learns the outcome."""
        written = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if os.path.isdir(written):
            hf_collator.save_generator(self._collator, written, self._ranks.rank)
        self._ranks.barrier()
        failure = None
        if state.is_world_process_zero:
            try:
                self._commit(args, state.global_step, state.max_steps, state.best_model_checkpoint)
            except Exception as error:  # every rank raises it, none waits for a commit that will not come
                failure = f"{type(error).__name__}: {error}"
        failures = [report for report in self._ranks.all_gather(failure) if report]
        if failures:
            raise CheckpointError(f"checkpoint of {state.global_step} steps not committed: {failures[0]}")
        self._last_save = time.monotonic()
        if self._stopping:
            self.should_stop = True

    def _commit(self, args: TrainingArguments, steps: int, max_steps: int, best_checkpoint: str | None) -> None:
        written = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{steps}")
        missing = [name for name in _rank_files(self._ranks.world_size) if not os.path.exists(os.path.join(written, name))]
        if missing:
            raise CheckpointError(
                f"{written} lacks {', '.join(missing)}: ranks on other machines write their RNG states into their own "
                "output_dir; with several nodes, output_dir and the checkpoint folder must be one shared folder"
            )
        keep_theirs = bool(args.load_best_model_at_end)  # the Trainer reads it back at the end
        foreign.commit(self.store, written, steps, payload=PAYLOAD, total_steps=max_steps or None, move=not keep_theirs)
        self._skipped.discard(steps)  # replaced by this one
        if self.keep_last is not None:
            best = _step_of(best_checkpoint) if keep_theirs else None
            self.store.prune(steps, self.keep_last, also_keep=() if best is None else (best,), skipped=self._skipped)

    def _find_best_in_store(self, state: TrainerState) -> None:
        """The best checkpoint the resumed state names lies in the output_dir of the attempt that wrote it, gone
        on another machine (the Trainer then forgets it, and load_best_model_at_end loads the last weights, not the
        best): point it at the store's copy of that step, kept from pruning."""
        if state.best_model_checkpoint is not None and os.path.isdir(state.best_model_checkpoint):
            return
        assert self._resumed is not None
        try:
            with open(os.path.join(self._resumed, "trainer_state.json")) as fh:
                recorded = json.load(fh).get("best_model_checkpoint")
        except (OSError, ValueError):
            return
        step = _step_of(recorded)
        if step is None:
            return
        kept = dict(self.store.committed()).get(step)
        if kept is not None:
            state.best_model_checkpoint = kept
        else:
            log.warning("the best checkpoint %s (step %d) is not in the store: load_best_model_at_end cannot load it",
                        recorded, step)


def _step_of(checkpoint: str | None) -> int | None:
    """The step of a Trainer checkpoint folder (``checkpoint-<step>``) or a committed one (``ckpt-<step>``)."""
    if not checkpoint:
        return None
    name = os.path.basename(os.path.normpath(checkpoint))
    for prefix in (f"{PREFIX_CHECKPOINT_DIR}-", layout.CHECKPOINT_PREFIX):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):])
    return None


def check_one_output_dir(ranks: distributed.SingleProcess | distributed.TorchDistributed, output_dir: str) -> None:
    """CheckpointError on every rank, before any step, unless every rank sees the file rank 0 writes into its
    output_dir: each rank writes its RNG states into the checkpoint there, which the main process commits. With
    several nodes and an output_dir on each node's own disk, the first save failed, after its steps were trained."""
    if ranks.world_size == 1:
        return
    name = None
    if ranks.rank == 0:
        os.makedirs(output_dir, exist_ok=True)
        name = f".spotrun-shared-{secrets.token_hex(8)}"
        with open(os.path.join(output_dir, name), "w"):
            pass
    name = ranks.broadcast_from_first(name)
    seen = ranks.exchange(os.path.exists(os.path.join(output_dir, name)))
    if ranks.rank == 0:
        os.remove(os.path.join(output_dir, name))
    apart = [rank for rank, sees in enumerate(seen) if not sees]
    if apart:
        raise CheckpointError(
            f"output_dir {output_dir} is not one folder for every rank: rank {', '.join(map(str, apart))} does not see "
            "what rank 0 writes there, and every rank writes its RNG states into the checkpoints there; with several "
            "nodes, output_dir and the checkpoint folder must be one shared folder"
        )


def _warn_of_random_batches(loader: Any, step: int) -> None:
    """A mid-epoch resume is inexact when fetching a batch draws random numbers: the Trainer restores the RNG states
    only after fetching its first batches (and a collator's own generator is saved past the batch after the
    checkpoint's, which the DataLoader had already collated: ``hf_collator``). Of what draws, only
    transformers' masking collators are known here; a dataset's ``__getitem__`` or a collator of the user's may too."""
    collator = hf_collator.collator_of(loader)
    if _draws_for_every_batch(collator):
        why = ("its own generator (seed=) was saved after the DataLoader had drawn the next batch's masks"
               if getattr(collator, "seed", None) is not None
               else "the Trainer restores the RNG states only after fetching the first batches")
        warnings.warn(
            f"resuming mid-epoch (step {step}) with {type(collator).__name__}, which draws random numbers for every "
            f"batch: {why}, so the masks from here on differ from an uninterrupted run's, and so will the weights "
            "(a transformers limitation)",
            CheckpointWarning,
            stacklevel=2,
        )


def _warn_of_masks_in_persistent_workers(loader: Any) -> None:
    """A collator run in persistent DataLoader workers draws from random state that lives in those processes from one
    epoch to the next (``hf_collator``): no checkpoint holds it, and a resume starts the workers afresh. Said once, at
    the start of training, so that the run can be set up otherwise before a preemption."""
    collator = hf_collator.collator_of(loader)
    if not _draws_for_every_batch(collator):
        return
    warnings.warn(
        f"dataloader_persistent_workers=True (dataloader_num_workers={loader.num_workers}): "
        f"{type(collator).__name__} draws every batch's masks in the workers, whose random state (a seeded collator's "
        "own generator, one copy per worker, or the RNGs each worker was seeded with) carries on there from one epoch "
        "to the next, out of any checkpoint's reach; a resumed run starts its workers afresh, so even a resume at an "
        "epoch's start masks differently from an uninterrupted run and ends with other weights. For exact resumes "
        "set dataloader_persistent_workers=False (workers started at each epoch are seeded from the RNG states the "
        "checkpoint restores) or dataloader_num_workers=0",
        CheckpointWarning,
        stacklevel=2,
    )


def _draws_for_every_batch(collator: Any) -> bool:
    """Whether the collator is one of transformers' masking ones, which draw random numbers for every batch."""
    masks = isinstance(collator, DataCollatorForLanguageModeling) and collator.mlm
    return masks or isinstance(collator, DataCollatorForPermutationLanguageModeling)


def _at_epoch_end(state: TrainerState) -> bool:
    """Whether the step just taken is its epoch's last (the Trainer sets ``epoch`` to ``epoch + (batch + 1) /
    batches_in_epoch``: a whole number there)."""
    return state.epoch is not None and float(state.epoch).is_integer()


def _rank_files(world_size: int) -> list[str]:
    """The RNG state files the Trainer writes into a checkpoint, one per process (their names since 4.x)."""
    return ["rng_state.pth"] if world_size == 1 else [f"rng_state_{rank}.pth" for rank in range(world_size)]
