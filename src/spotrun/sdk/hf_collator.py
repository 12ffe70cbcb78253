"""The random generator of a 🤗 masking collator, kept with each Trainer checkpoint.

``DataCollatorForLanguageModeling(seed=...)`` draws its masks from a ``torch.Generator`` of its own (created from
the seed at its first batch, in the process that collates), not from the RNGs the Trainer saves: resumed, it started
again from its seed. Its state at the save is written into the checkpoint, one file per rank, and put back before
the resumed run's first batch. That makes a resume at an epoch's start exact. One mid-epoch stays inexact: the
DataLoader has already collated the batch after the checkpoint's (accelerate fetches one ahead), so the state saved
is past it. A collator run in DataLoader workers keeps its generator there, one copy per worker (seeded with
``seed + worker id``), out of reach: nothing is saved. Workers started afresh at each epoch seed it again as an
uninterrupted run does, so a resume at an epoch's start stays exact; persistent workers
(``dataloader_persistent_workers``) carry it on from one epoch to the next, where a resumed run starts them afresh,
so no resume is exact, and ``TrainerCheckpoints`` warns of it at the start of training.
"""

from __future__ import annotations

import os
from typing import Any

import torch

GENERATOR_FILE = "spotrun-collator-generator-{rank}.pt"


def collator_of(loader: Any) -> Any:
    """The collator of a DataLoader, outside the Trainer's RemoveColumnsCollator; None when it has none."""
    collator = getattr(loader, "collate_fn", None)
    return getattr(collator, "data_collator", collator)


def own_generator(collator: Any) -> torch.Generator | None:
    """The torch.Generator a seeded collator draws from in this process, once it has drawn; else None."""
    generator = getattr(collator, "generator", None)
    return generator if getattr(collator, "seed", None) is not None and isinstance(generator, torch.Generator) else None


def save_generator(collator: Any, folder: str, rank: int) -> None:
    """Write the collator's generator state into the checkpoint ``folder`` (nothing when it has none here)."""
    generator = own_generator(collator)
    if generator is not None:
        torch.save(generator.get_state(), os.path.join(folder, GENERATOR_FILE.format(rank=rank)))


def restore_generator(collator: Any, folder: str, rank: int) -> bool:
    """Give the collator the generator state saved in the checkpoint ``folder``; False when there is none to give."""
    path = os.path.join(folder, GENERATOR_FILE.format(rank=rank))
    if getattr(collator, "seed", None) is None or not os.path.isfile(path):
        return False
    generator = torch.Generator()
    generator.set_state(torch.load(path, weights_only=True))
    collator.generator = generator
    collator._generator_pid = os.getpid()  # else the collator takes the generator for another process's and reseeds
    return True
