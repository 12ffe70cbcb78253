"""A training script for the exact-resume test: run as `python sdk_exact_trainer.py CKPT_DIR TOTAL_STEPS OUT`.

It uses everything a resume must restore: dropout (torch RNG), Python and NumPy RNG (input noise), a
shuffling sampler mid-epoch (dataset size not a multiple of the batch), Adam, a StepLR, a GradScaler and
extra user values. A side DataLoader with a worker checks that workers (with spotrun's worker_init_fn)
ignore the preemption signal the agent sends to the whole process group. Prints "start N", then "step N" after each step and "stopped N" when preempted; writes the final
model and optimizer state to OUT.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

import spotrun
from sdk_trainer_protocol import end_step


def main(checkpoint_dir: str, total_steps: int, out_path: str) -> None:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    features = torch.randn(101, 6)
    labels = torch.randint(0, 3, (101,))
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.7)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    sampler = spotrun.ResumableSampler(len(features), batch_size=8, shuffle=True, seed=42)
    extra = {"loss_sum": torch.zeros(()), "seen": 0}
    state = spotrun.torch_state(
        model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, sampler=sampler, extra=extra
    )
    ckpt = spotrun.Checkpointer(checkpoint_dir, every_steps=5)
    side_loader = DataLoader(
        range(10_000), batch_size=4, num_workers=1, worker_init_fn=spotrun.ignore_preemption_signals
    )
    side_batches = iter(side_loader)

    start = ckpt.restore(state) or 0
    print(f"start {start}", flush=True)
    batches = sampler.stream()
    for step in range(start, total_steps):
        indices = next(batches)
        next(side_batches)
        noise = torch.from_numpy(np.random.normal(0, 0.01, size=(len(indices), 6)).astype(np.float32))
        inputs = features[indices] * random.uniform(0.9, 1.1) + noise
        loss = nn.functional.cross_entropy(model(inputs), labels[indices])
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        extra["loss_sum"] += loss.detach()
        extra["seen"] += len(indices)
        end_step(ckpt, state, step)
    ckpt.save(state, total_steps - 1)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "extra": extra}, out_path)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
