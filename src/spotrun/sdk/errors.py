"""What the Checkpointer raises and warns about."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A save failed (nothing was committed for that step), or restore found nothing it could use."""


class NoValidCheckpoint(CheckpointError):
    """Checkpoints exist but none of them verifies; each one is named with its reason. Nothing was loaded
    and nothing was deleted."""


def no_valid_checkpoint(root: str, rejected: list[str]) -> NoValidCheckpoint:
    """The error for a folder whose every checkpoint was rejected, each listed with its reason."""
    listed = "\n  ".join(rejected)
    return NoValidCheckpoint(
        f"no valid checkpoint in {root}; nothing was loaded or deleted (move these aside to start from scratch):"
        f"\n  {listed}"
    )


def only_foreign_checkpoints(root: str, rejected: list[str]) -> NoValidCheckpoint:
    """The error for a folder that holds a framework's checkpoints alone: not damaged, so not to be moved aside."""
    listed = "\n  ".join(rejected)
    return NoValidCheckpoint(
        f"{root} holds another framework's checkpoints, not the Checkpointer's, which this reads: load them with that "
        f"framework (nothing was loaded or deleted):\n  {listed}"
    )


class PrunedMeanwhile(CheckpointError):
    """The checkpoint was removed while it was read: its writer pruned it (``keep_last``), having committed a newer
    one. It is not damaged, only gone; nothing of it was loaded."""


class IncompatibleCheckpoint(CheckpointError):
    """The checkpoint's state does not fit the training state (another model shape, optimizer or sampler
    configuration); each mismatch is named. Nothing was loaded."""


class UnknownComponents(IncompatibleCheckpoint, KeyError):
    """The checkpoint has components the training state lacks: it is of another program. A KeyError too,
    as it was before IncompatibleCheckpoint existed."""

    __str__ = RuntimeError.__str__  # the message as written, not KeyError's quoted repr


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped on restore (corrupt or unreadable) or only partly applied."""


class MissingComponents(CheckpointError, KeyError):
    """Components asked for by name that the checkpoint does not hold."""

    __str__ = RuntimeError.__str__
