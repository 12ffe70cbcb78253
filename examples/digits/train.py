"""A small MLP on scikit-learn's digits, made preemption-proof with a few lines of spotrun.

Environment: EPOCHS (default 40), STEP_SECONDS (a sleep per step standing in for a bigger model, default 0),
CHECKPOINT_EVERY (steps between checkpoints, default 10), SPOTRUN_CHECKPOINT_DIR (default ./checkpoints).
At the end it prints the test accuracy and writes final.json into the checkpoint folder:
{"sha256": weights fingerprint, "accuracy": ..., "steps": ..., "train_seconds": how long this process's training
loop took, from its restore to the end}. Two runs with the same environment give the
same sha256, however often they are preempted and resumed.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import spotrun

SEED = 1234
BATCH_SIZE = 64
SPLIT_NAMES = ("x_train", "y_train", "x_test", "y_test")
# The split, saved at the first load: scikit-learn's import takes about 2 s of CPU, paid again by every rank at every
# restart of a preempted job. Rename the file when the split below changes.
SPLIT_FILE = Path(__file__).resolve().parent / ".data" / "digits-split-v1.npz"


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digits' pixels scaled to [0, 1] and their labels, 80% for training and 20% for test (stratified, fixed
    seed)."""
    if SPLIT_FILE.exists():
        with np.load(SPLIT_FILE) as saved:
            split = tuple(saved[name] for name in SPLIT_NAMES)
    else:
        split = split_digits()
        try:
            save_split(SPLIT_FILE, split)
        except OSError as problem:  # e.g. a read-only checkout: split again at the next start
            print(f"could not save the split to {SPLIT_FILE}: {problem}", flush=True)
    x_train, y_train, x_test, y_test = (torch.from_numpy(array) for array in split)
    return x_train, y_train, x_test, y_test


def split_digits() -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    features = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        features, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    return x_train, y_train, x_test, y_test


def save_split(path: Path, split: tuple[np.ndarray, ...]) -> None:
    path.parent.mkdir(exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")  # ranks starting together each write their own
    with open(partial, "wb") as out:
        np.savez(out, **dict(zip(SPLIT_NAMES, split)))
    os.replace(partial, path)


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10)
    )


def make_deterministic() -> None:
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def accuracy(model: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        predicted = model(features).argmax(dim=1)
    model.train()
    return float((predicted == labels).float().mean())


def main() -> None:
    epochs = int(os.environ.get("EPOCHS", "40"))
    step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
    if epochs < 1 or step_seconds < 0:
        raise SystemExit(f"EPOCHS must be at least 1 and STEP_SECONDS not negative (got {epochs}, {step_seconds})")
    make_deterministic()
    x_train, y_train, x_test, y_test = load_data()

    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    sampler = spotrun.ResumableSampler(len(x_train), batch_size=BATCH_SIZE, shuffle=True, seed=SEED)
    total_steps = epochs * len(sampler)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)

    ckpt = spotrun.Checkpointer(every_steps=int(os.environ.get("CHECKPOINT_EVERY", "10")), total_steps=total_steps)
    state = spotrun.torch_state(model=model, optimizer=optimizer, scheduler=scheduler, sampler=sampler)
    start = ckpt.restore(state) or 0
    print(f"starting at step {start} of {total_steps} (checkpoints in {ckpt.fs.unstrip_protocol(ckpt.root)})", flush=True)

    batches = sampler.stream()
    loss_fn = nn.CrossEntropyLoss()
    began = time.perf_counter()
    for step in range(start, total_steps):
        indices = next(batches)
        loss = loss_fn(model(x_train[indices]), y_train[indices])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step_seconds:
            time.sleep(step_seconds)
        if step % 10 == 0 or step == total_steps - 1:
            print(f"epoch {sampler.epoch} step {step} loss {loss.item():.4f}", flush=True)
        ckpt.step(state, step)
        ckpt.exit_if_stopped()  # preempted: the final checkpoint is committed; exit 75 = "resume me"

    ckpt.save(state, total_steps - 1)
    result = {"sha256": spotrun.weights_sha256(model), "accuracy": accuracy(model, x_test, y_test), "steps": total_steps,
              "train_seconds": time.perf_counter() - began}
    with ckpt.fs.open(f"{ckpt.root}/final.json", "w") as fh:
        json.dump(result, fh)
    print(f"test accuracy {result['accuracy']:.4f} after {total_steps} steps; weights sha256 {result['sha256']}", flush=True)


if __name__ == "__main__":
    main()
