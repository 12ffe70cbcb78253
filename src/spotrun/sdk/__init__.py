"""What a training script imports to survive preemption: checkpoint, stop at a step boundary, resume exactly.

```python
import spotrun

ckpt = spotrun.Checkpointer(every_steps=100)           # $SPOTRUN_CHECKPOINT_DIR, else ./checkpoints
sampler = spotrun.ResumableSampler(len(dataset), batch_size=64, seed=0)
state = spotrun.torch_state(model=model, optimizer=opt, scheduler=sched, sampler=sampler)
batches = sampler.stream()
for step in range(ckpt.restore(state) or 0, total_steps):   # restore: steps already done, or None
    train_step(next(batches))
    ckpt.step(state, step)      # step = index of the step just finished
    ckpt.exit_if_stopped()      # after a preemption signal: final checkpoint done, exit 75
ckpt.save(state, total_steps - 1)
```

See ``checkpointer`` for the step convention, the save protocol and the distributed rules.
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use, so that the agent, which only needs ``spotrun.sdk.layout``, does not import torch.
_EXPORTS = {
    "PREEMPTED_EXIT_CODE": "preemption",
    "PreemptionFlag": "preemption",
    "ignore_preemption_signals": "preemption",
    "preemption_signals_held": "preemption",
    "preemption_flag": "preemption",
    "CheckpointError": "errors",
    "CheckpointWarning": "errors",
    "Checkpointer": "checkpointer",
    "CorruptCheckpoint": "layout",
    "IncompatibleCheckpoint": "errors",
    "LoadedCheckpoint": "reading",
    "MissingComponents": "errors",
    "load_checkpoint": "reading",
    "NoValidCheckpoint": "errors",
    "PrunedMeanwhile": "errors",
    "ResumableLoader": "loader",
    "ResumableSampler": "sampler",
    "RNGState": "state",
    "TrainingState": "state",
    "torch_state": "state",
    "TrainerCheckpoints": "hf_trainer",
    "LightningCheckpoints": "lightning",
    "weights_sha256": "hashing",
    "exact_allreduce": "ddp",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spotrun.sdk' has no attribute {name!r}")
    return getattr(importlib.import_module(f"spotrun.sdk.{module}"), name)
