"""A 🤗 Transformers Trainer run on scikit-learn's digits, made reentrant with three lines of spotrun.

    python train.py            # MAX_STEPS (default 300), SAVE_STEPS (the Trainer's own saves, default 100),
                               # SAVE_SECONDS (spotrun's saves by wall time, default 300), STEP_SECONDS (a pause
                               # per step that stands in for a bigger model, default 0)

On a preemption notice (SIGTERM) the run saves at the end of the step and exits 75; run it again and it resumes
from that checkpoint, with the weights an uninterrupted run would have had. At the end it prints the weights' hash
and writes it to final.json in the checkpoint folder (under torchrun, the world's main process alone), which the
agent backs up with the checkpoints.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import torch
from sklearn.datasets import load_digits
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

import spotrun


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, pixels: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.body(pixels)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class Digits(torch.utils.data.Dataset):
    def __init__(self) -> None:
        digits = load_digits()
        self.pixels = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        self.labels = torch.tensor(digits.target)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixels": self.pixels[index], "labels": self.labels[index]}


class Pause(TrainerCallback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, *_: object, **__: object) -> None:
        time.sleep(self.seconds)


def trainer(extra_callbacks: list | None = None) -> tuple[Trainer, spotrun.TrainerCheckpoints]:
    spot = spotrun.TrainerCheckpoints(every_seconds=float(os.environ.get("SAVE_SECONDS", "300")))
    args = TrainingArguments(
        output_dir=os.environ.get("OUTPUT_DIR") or tempfile.mkdtemp(prefix="hf-output-"),
        max_steps=int(os.environ.get("MAX_STEPS", "300")), per_device_train_batch_size=32, learning_rate=0.01,
        seed=7, save_strategy="steps", save_steps=int(os.environ.get("SAVE_STEPS", "100")), report_to=[],
        use_cpu=True, disable_tqdm=True, logging_strategy="no",
    )
    torch.manual_seed(7)
    pause = [Pause(float(os.environ["STEP_SECONDS"]))] if float(os.environ.get("STEP_SECONDS", "0")) > 0 else []
    return Trainer(Net(), args, train_dataset=Digits(), callbacks=[*pause, spot, *(extra_callbacks or [])]), spot


def write_final(run: Trainer, spot: spotrun.TrainerCheckpoints) -> str:
    """The final weights' hash, written to final.json by the world's main process alone (under torchrun every rank
    runs this script, and all of them wrote the one file at once); written aside and renamed into place, so that a
    reader (the agent's backup, a demo) finds all of it or none."""
    weights = spotrun.weights_sha256(run.model.state_dict())
    if run.is_world_process_zero():
        path = os.path.join(spot.store.root, "final.json")
        with open(f"{path}.partial", "w") as fh:
            json.dump({"sha256": weights, "steps": run.state.global_step}, fh)
        os.replace(f"{path}.partial", path)
    return weights


if __name__ == "__main__":
    run, spot = trainer()
    start = spot.resume_from()
    print(f"starting from {start or 'scratch'}", flush=True)
    run.train(resume_from_checkpoint=start)
    spot.exit_if_stopped()
    weights = write_final(run, spot)
    print(f"weights sha256: {weights}", flush=True)
