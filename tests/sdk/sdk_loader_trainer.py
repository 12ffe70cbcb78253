"""The exact-resume test's trainer fed by a ResumableLoader with two workers: run as
`python sdk_loader_trainer.py CKPT_DIR TOTAL_STEPS OUT`.

The dataset adds random noise in the workers (augmentation), the model has dropout (the training process's
torch RNG), and the loader's workers read batches ahead; a resume must still see the same batches with the
same noise, and the same dropout masks. Prints like sdk_exact_trainer.py.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

import spotrun
from sdk_trainer_protocol import end_step


class AugmentedPoints(Dataset):
    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(7)
        self.features = torch.randn(101, 6, generator=generator)
        self.labels = torch.randint(0, 3, (101,), generator=generator)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        jitter = torch.randn(6) * 0.05 + random.uniform(-0.01, 0.01) + float(np.random.normal(0, 0.01))
        return self.features[index] + jitter, self.labels[index]


def main(checkpoint_dir: str, total_steps: int, out_path: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = spotrun.ResumableLoader(AugmentedPoints(), batch_size=8, seed=42, num_workers=2, prefetch_factor=4)
    state = spotrun.torch_state(model=model, optimizer=optimizer, sampler=loader)
    ckpt = spotrun.Checkpointer(checkpoint_dir, every_steps=5)

    start = ckpt.restore(state) or 0
    print(f"start {start}", flush=True)
    batches = loader.stream()
    for step in range(start, total_steps):
        inputs, labels = next(batches)
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        end_step(ckpt, state, step)
    ckpt.save(state, total_steps - 1)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, out_path)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
