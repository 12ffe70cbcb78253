"""spotrun: train on spot instances without babysitting.

The training-script API is re-exported here (``spotrun.Checkpointer``, ``spotrun.torch_state``, ...); it is
loaded on first use, so ``import spotrun`` stays light and never imports the control plane.
"""

from __future__ import annotations

import importlib
from typing import Any

_SDK_NAMES = {
    "PREEMPTED_EXIT_CODE",
    "CheckpointError",
    "CheckpointWarning",
    "Checkpointer",
    "load_checkpoint",
    "ResumableLoader",
    "ResumableSampler",
    "exact_allreduce",
    "TrainerCheckpoints",
    "LightningCheckpoints",
    "TrainingState",
    "ignore_preemption_signals",
    "preemption_signals_held",
    "torch_state",
    "weights_sha256",
}

__all__ = sorted(_SDK_NAMES)


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        return getattr(importlib.import_module("spotrun.sdk"), name)
    raise AttributeError(f"module 'spotrun' has no attribute {name!r}")
