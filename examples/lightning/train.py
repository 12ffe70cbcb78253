"""A Lightning run on scikit-learn's digits, made reentrant with four lines of spotrun.

    python train.py            # MAX_STEPS (default 300), SAVE_STEPS (spotrun's saves every so many steps, default
                               # 100), SAVE_SECONDS (and by wall time, default 300), STEP_SECONDS (a pause per step
                               # that stands in for a bigger model, default 0)

On a preemption notice (SIGTERM) the run saves at the end of the step and exits 75; run it again and it resumes
from that checkpoint, mid-epoch, with the weights an uninterrupted run would have had. At the end it prints the
weights' hash and writes it to final.json in the checkpoint folder, which the agent backs up with the checkpoints.
"""

from __future__ import annotations

import json
import os
import time

import lightning as L
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

import spotrun


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        pixels, labels = batch
        return nn.functional.cross_entropy(self.body(pixels), labels)

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class Pause(L.Callback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *_: object) -> None:
        time.sleep(self.seconds)


def digits() -> TensorDataset:
    data = load_digits()
    return TensorDataset(torch.tensor(data.data / 16.0, dtype=torch.float32), torch.tensor(data.target))


def trainer(extra_callbacks: list | None = None) -> tuple[L.Trainer, spotrun.LightningCheckpoints]:
    spot = spotrun.LightningCheckpoints(
        every_steps=int(os.environ.get("SAVE_STEPS", "100")), every_seconds=float(os.environ.get("SAVE_SECONDS", "300")),
    )
    pause = [Pause(float(os.environ["STEP_SECONDS"]))] if float(os.environ.get("STEP_SECONDS", "0")) > 0 else []
    run = L.Trainer(
        max_steps=int(os.environ.get("MAX_STEPS", "300")), accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[*pause, spot, *(extra_callbacks or [])],
    )
    return run, spot


if __name__ == "__main__":
    L.seed_everything(7, verbose=False)
    model = Net()
    loader = spotrun.ResumableLoader(digits(), batch_size=32, seed=7)  # resumes mid-epoch, where the run stopped
    run, spot = trainer()
    start = spot.resume_from()
    print(f"starting from {start or 'scratch'}", flush=True)
    run.fit(model, loader, ckpt_path=start)
    spot.exit_if_stopped()
    weights = spotrun.weights_sha256(model.state_dict())
    with open(os.path.join(spot.store.root, "final.json"), "w") as fh:
        json.dump({"sha256": weights, "steps": run.global_step}, fh)
    print(f"weights sha256: {weights}", flush=True)
