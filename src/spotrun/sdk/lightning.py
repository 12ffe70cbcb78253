"""A Lightning ``Trainer`` run made reentrant: its checkpoints kept crash-safe in spotrun's layout, one saved and
the run stopped at the step a preemption notice arrives, and the next attempt resumed exactly from the newest
intact one.

```python
import spotrun

spot = spotrun.LightningCheckpoints()                # $SPOTRUN_CHECKPOINT_DIR, else ./checkpoints
loader = spotrun.ResumableLoader(dataset, batch_size=64, seed=0)   # resumes mid-epoch, exactly
trainer = L.Trainer(max_steps=10_000, callbacks=[spot])
trainer.fit(model, loader, ckpt_path=spot.resume_from())   # None: nothing saved yet, start afresh
spot.exit_if_stopped()                               # after a notice: saved, exit 75 ("resume me")
```

Lightning's own checkpoint holds the weights, optimizers, schedulers, loops and callbacks' states, and the state
of a train loader that has one: a ``spotrun.ResumableLoader`` resumes at the batch where the run stopped (a plain
DataLoader would start its epoch over, with a warning). What Lightning does not save, this callback adds to it: the
Python, NumPy and torch (and CUDA) RNG states, every rank's under DDP, so dropout and augmentation continue their
streams, ranks seeded apart included. A resumed run ends with the weights of an uninterrupted one.

Each save goes through ``trainer.save_checkpoint`` into a staging folder and is committed as spotrun's checkpoints
are (``foreign``): fsynced, checksummed, a manifest written last, renamed into place as ``ckpt-<step>``; the agent
backs it up. Saves happen every ``every_steps`` optimizer steps, every ``every_seconds`` of wall time (default 300),
and at a preemption signal (SIGTERM, SIGUSR1), which also stops training at the end of that step, without the
validation Lightning runs before an early stop (one the schedule runs there is kept). A step is Lightning's
optimizer step, the one ``trainer.global_step`` and ``max_steps`` count and a checkpoint is named by
(``ckpt-<step>``, resumed at that ``global_step``): under manual optimization each optimizer's ``step()`` is one, so
a batch that steps two optimizers takes two, and ``every_steps=10`` saves every 5 batches; a save is made at the end
of the first batch that reaches each multiple of ``every_steps``. Lightning would answer SIGTERM by raising out of
``fit`` after the step (``SIGTERMException``); while training, this callback holds the signals instead and gives
them back at the end. Under DDP every rank agrees each step whether to save or stop (one all_reduce) and learns
whether rank 0's commit worked.

Rank 0 is the folder's one writer from its first save to the end of training (or its exception), as a Checkpointer
is (``writerlock``): another run saving to the same folder is refused at its first save (CheckpointError), before
it writes anything there.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

from spotrun.sdk import foreign, layout
from spotrun.sdk.schedule import DEFAULT_EVERY_SECONDS, check_schedule
from spotrun.sdk.errors import CheckpointError, CheckpointWarning
from spotrun.sdk.preemption import DEFAULT_SIGNALS, PreemptionFlag, exit_preempted, preemption_flag
from spotrun.sdk.state import RNGState
from spotrun.sdk.storage import STAGING_PREFIX

log = logging.getLogger(__name__)

PAYLOAD = layout.LIGHTNING_PAYLOAD  # the manifest's mark of a Lightning checkpoint
FRAMEWORK = "Lightning"
CHECKPOINT_FILE = "lightning.ckpt"


class LightningCheckpoints(pl.Callback):
    """A Lightning ``Callback`` that keeps the Trainer's checkpoints in spotrun's store (a local folder: the agent
    backs it up), adds the RNG states to them, and stops training at a preemption signal, after a save.
    ``keep_last`` committed checkpoints are kept."""

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = DEFAULT_EVERY_SECONDS,
        keep_last: int | None = 2,
        signals: Iterable[int] = DEFAULT_SIGNALS,
        flag: PreemptionFlag = preemption_flag,
    ) -> None:
        check_schedule(every_seconds=every_seconds, keep_last=keep_last, every_steps=every_steps)
        self.store = foreign.local_store(location, FRAMEWORK)
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.keep_last = keep_last
        self._signals = tuple(signals)
        self._flag = flag
        self._held: dict[int, Any] = {}  # Lightning's handlers of the signals, while this callback holds them
        if self._signals and threading.current_thread() is threading.main_thread():
            flag.install(self._signals)  # a notice before training starts is not lost
        self._last_save = time.monotonic()
        self._saved_step = self._seen_step = -1
        self._after_validation: int | None = None  # the step of a save to make (again) once a validation has run
        self._distributed = False
        self._skipped: set[int] = set()  # the steps of checkpoints resume_from skipped as damaged
        self.should_stop = False  # True once a preemption stopped training after its checkpoint was committed

    # -- the script's calls ---------------------------------------------------------------------------------

    def resume_from(self) -> str | None:
        """The checkpoint file of the newest checkpoint whose every file matches its manifest, for
        ``trainer.fit(..., ckpt_path=...)``; None when there is none. A damaged one is skipped with a
        CheckpointWarning; one that its writer prunes while it is checked is not damaged, and the newest one there is
        then is taken. NoValidCheckpoint (nothing loaded or deleted) when there are some and none is intact."""
        folder = foreign.newest_intact(self.store, PAYLOAD, FRAMEWORK, self._skipped)
        return None if folder is None else os.path.join(folder, CHECKPOINT_FILE)

    def exit_if_stopped(self) -> None:
        """After training stopped at a preemption signal, its checkpoint committed: exit with PREEMPTED_EXIT_CODE
        (75), which tells the agent "resume me". Under torch.distributed the process ends at once (`os._exit`,
        after flushing its output), as ``TrainerCheckpoints`` does: gloo has aborted ranks torn down by the
        interpreter's exit."""
        if self.should_stop:
            exit_preempted(self._signals, at_once=self._distributed)

    # -- what Lightning keeps in its checkpoint -------------------------------------------------------------

    @property
    def state_key(self) -> str:
        return "spotrun.LightningCheckpoints"  # one name whatever the arguments, so a resume finds it

    def state_dict(self) -> dict[str, Any]:
        """The global RNG states as they are at the save, in types ``torch.load(weights_only=True)`` reads: this
        process's, and under torch.distributed every rank's (Lightning calls this on every rank; rank 0 writes)."""
        rng = _portable(RNGState().state_dict())
        ranks = _every_ranks(rng)
        return {"rng": rng} if ranks is None else {"rng": rng, "rng_of_ranks": ranks}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        RNGState().load_state_dict(_restored(_own_rng(state_dict)))

    # -- Lightning's events ---------------------------------------------------------------------------------

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._distributed = trainer.world_size > 1
        self._hold_signals()
        self._last_save = time.monotonic()
        self._saved_step = self._seen_step = trainer.global_step
        self._after_validation = None

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int,
    ) -> None:
        step, before = trainer.global_step, self._seen_step
        self._seen_step = step
        held, self._after_validation = self._after_validation is not None, None  # no validation came: save now
        if not held and (step == before or step == self._saved_step):
            return  # gradients still accumulating (no optimizer step since the last batch), or saved at this step
        due = held or (self.every_steps is not None and _reached_a_multiple(before, step, self.every_steps)) or (
            self.every_seconds is not None and time.monotonic() - self._last_save >= self.every_seconds
        )
        stop, due = _any_rank(trainer, [self._flag.is_set, bool(due)])
        if stop:
            log.warning("preemption requested: saving %d steps and stopping", step)
        if (stop or due) and _validates_next(trainer):
            # Lightning resumes a checkpoint saved before a validation past it, but the validation draws from the
            # global RNGs (a shuffled or worker-fed loader, random validation steps): saved now, the resumed run
            # would go on with RNG states the uninterrupted one no longer has. Saved again once it has run (at a
            # notice, saved now as well: the validation may outlast the notice)
            self._after_validation = step
            if not stop:
                return
        if stop or due:
            self._save(trainer, step)
        if stop:
            trainer.should_stop = True
            self.should_stop = True
            if self._after_validation is None:
                _skip_the_validation_of_stopping(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._after_validation is None or trainer.sanity_checking:
            return
        step, self._after_validation = self._after_validation, None
        self._save(trainer, step)  # the same step, committed over the one saved before the validation

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_training()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._end_training()

    def _end_training(self) -> None:
        self._give_signals_back()
        self.store.release()  # the folder, held since the first save (``_claim``), is free for another run

    # -- saving ---------------------------------------------------------------------------------------------

    def _save(self, trainer: pl.Trainer, step: int) -> None:
        """Every rank asks Lightning to save (rank 0 writes); rank 0 commits; every rank learns the outcome."""
        folder = f"{self.store.root}/{STAGING_PREFIX}lightning-{step}"  # cleaned away if a save dies half-way
        self._claim(trainer, step)
        started = time.monotonic()
        trainer.save_checkpoint(os.path.join(folder, CHECKPOINT_FILE))
        trainer.strategy.barrier("spotrun-save")
        failure = None
        if trainer.is_global_zero:
            try:
                total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
                foreign.commit(self.store, folder, step, payload=PAYLOAD, total_steps=total, started=started)
                self._skipped.discard(step)  # replaced by this one
                if self.keep_last is not None:
                    self.store.prune(step, self.keep_last, skipped=self._skipped)
            except Exception as error:  # every rank raises it, none waits for a commit that will not come
                failure = f"{type(error).__name__}: {error}"
        failure = trainer.strategy.broadcast(failure, src=0)
        if failure:
            raise CheckpointError(f"checkpoint of {step} steps not committed: {failure}")
        self._last_save = time.monotonic()
        self._saved_step = step

    def _claim(self, trainer: pl.Trainer, step: int) -> None:
        """Rank 0 makes this run the folder's one writer (``writerlock``) before Lightning writes into it, as a
        Checkpointer's first save does; every rank learns whether another writer holds it, and none writes then."""
        failure = None
        if trainer.is_global_zero:
            try:
                self.store.claim()
            except Exception as error:
                failure = f"{type(error).__name__}: {error}"
        failure = trainer.strategy.broadcast(failure, src=0)
        if failure:
            raise CheckpointError(f"checkpoint of {step} steps not committed: {failure}")

    # -- signals --------------------------------------------------------------------------------------------

    def _hold_signals(self) -> None:
        """The preemption signals set the flag only, not Lightning's SIGTERM handler (which would end ``fit`` with
        an exception after the step)."""
        if self._signals and threading.current_thread() is threading.main_thread():
            self._held = self._flag.hold(self._signals)

    def _give_signals_back(self) -> None:
        for signum, handler in self._held.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._held.clear()


def _validates_next(trainer: pl.Trainer) -> bool:
    """Whether Lightning runs a validation after this training batch (``val_check_interval``, an epoch's end), as
    it decides in its epoch loop. Asked before this callback sets ``should_stop`` (which adds one of its own)."""
    fit_loop = getattr(trainer, "fit_loop", None)
    loop = getattr(fit_loop, "epoch_loop", None)
    decide = getattr(loop, "_should_check_val_fx", None)
    fetcher = getattr(fit_loop, "_data_fetcher", None)
    if decide is None or fetcher is None or getattr(loop, "_skip_next_val", False):
        return False
    return bool(decide(fetcher))


def _reached_a_multiple(before: int, step: int, every: int) -> bool:
    """Whether the optimizer steps of this batch (after ``before``, up to ``step``) reach a multiple of ``every``. A
    batch may take several: under manual optimization each optimizer's ``step()`` counts in ``global_step`` (and in
    ``max_steps``), so batches stepping two optimizers go 2, 4, 6, ...: ``step % 5 == 0`` stepped over 5 and saved
    every 10 steps."""
    return step // every > before // every


def _skip_the_validation_of_stopping(trainer: pl.Trainer) -> None:
    """Lightning validates once more when ``should_stop`` ends a run early (as ``EarlyStopping`` would want); at a
    notice that validation, which the uninterrupted run does not make at this step, only spends the notice's grace
    before the process can exit. Every rank skips it: the stop is agreed."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    if loop is not None and hasattr(loop, "_skip_next_val"):
        loop._skip_next_val = True


def _any_rank(trainer: pl.Trainer, flags: list[bool]) -> list[bool]:
    """Each flag, true where any rank's is: one all_reduce for all of them under DDP (none in one process)."""
    votes = torch.tensor([int(flag) for flag in flags], device=trainer.strategy.root_device)
    return [bool(vote) for vote in trainer.strategy.reduce(votes, reduce_op="sum").tolist()]


def _every_ranks(rng: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Each rank's RNG states, in rank order, under torch.distributed with more than one rank; else None. Ranks
    seeded apart (``seed_everything(seed + rank)``) draw apart, and each resumes its own streams."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    world = torch.distributed.get_world_size()
    if world == 1:
        return None
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, rng)
    return gathered


def _own_rng(state_dict: Mapping[str, Any]) -> Mapping[str, Any]:
    """This rank's RNG states from the checkpoint: its own where the checkpoint holds as many ranks' as run now;
    else the saving rank 0's (checkpoints made before every rank's were kept, or another number of ranks), with a
    warning when that number differs."""
    ranks = state_dict.get("rng_of_ranks")
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    world, rank = (torch.distributed.get_world_size(), torch.distributed.get_rank()) if distributed else (1, 0)
    if ranks is not None and len(ranks) == world:
        return ranks[rank]
    if ranks is not None:
        warnings.warn(
            f"the checkpoint holds the RNG states of {len(ranks)} ranks, this run has {world}: every rank resumes "
            "rank 0's random streams, not the ones an uninterrupted run would draw",
            CheckpointWarning,
            stacklevel=3,
        )
    return state_dict["rng"]


def _portable(state: Mapping[str, Any]) -> dict[str, Any]:
    """NumPy's RNG state with its key array as a tensor: ``torch.load(weights_only=True)`` refuses NumPy arrays."""
    kind, keys, position, has_gauss, gauss = state["numpy"]
    return {**state, "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss)}


def _restored(state: Mapping[str, Any]) -> dict[str, Any]:
    kind, keys, position, has_gauss, gauss = state["numpy"]
    return {**state, "numpy": (kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss)}

