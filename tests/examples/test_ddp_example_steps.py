"""examples/ddp/train.py trains EPOCHS epochs of data however many ranks resume it. Resumed on another number of
ranks, it kept counting to the old run's number of steps: 3 ranks' checkpoint at step 230 resumed on 2 trained 39
epochs for EPOCHS=30 (a helper following the README's "change nodes" found it), its cosine schedule past its end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import spotrun

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp" / "train.py"
TRAIN_EXAMPLES = 1437  # load_digits' 1,797 images less the 20% test split
EPOCHS = 30


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("ddp_example_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ddp_example_train"] = module
    spec.loader.exec_module(module)
    return module


def sampler(example, world_size: int) -> spotrun.ResumableSampler:
    return spotrun.ResumableSampler(TRAIN_EXAMPLES, batch_size=example.BATCH_SIZE, seed=example.SEED,
                                    world_size=world_size, rank=0)


def resumed_after(example, steps: int, saved_by: int, resumed_on: int) -> spotrun.ResumableSampler:
    saving = sampler(example, saved_by)
    batches = saving.stream()
    for _ in range(steps):
        next(batches)
    resumed = sampler(example, resumed_on)
    resumed.load_state_dict(saving.state_dict())
    return resumed


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("steps", [0, 1, 7, 8, 9, 100, 239])
def test_on_as_many_ranks_the_run_takes_the_steps_of_an_uninterrupted_one(example, world_size, steps):
    uninterrupted = EPOCHS * len(sampler(example, world_size))
    assert steps + example.steps_left(resumed_after(example, steps, world_size, world_size), EPOCHS) == uninterrupted


@pytest.mark.parametrize("saved_by, resumed_on, steps", [(3, 2, 230), (2, 3, 100), (3, 1, 17)])
def test_on_another_number_of_ranks_it_trains_to_the_last_epochs_end(example, saved_by, resumed_on, steps):
    resumed = resumed_after(example, steps, saved_by, resumed_on)
    left = example.steps_left(resumed, EPOCHS)
    batches = resumed.stream()
    for _ in range(left):
        next(batches)
    assert (resumed.epoch, resumed.position) == (EPOCHS - 1, resumed.samples_in(EPOCHS - 1))
