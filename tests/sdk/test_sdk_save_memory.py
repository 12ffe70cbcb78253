"""A save streams to disk and reuses the previous snapshot's host memory: its extra memory stays at about one
copy of the state, and reused buffers never leak one save's values into another checkpoint."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import torch

import spotrun
from spotrun.sdk.snapshot import snapshot_to_host

STATE_BYTES = 192 << 20


def test_snapshot_reuses_matching_tensors_and_copies_the_rest() -> None:
    first = snapshot_to_host({"w": torch.ones(4, 3), "b": [torch.zeros(2)], "n": 1})
    live = {"w": torch.full((4, 3), 2.0), "b": [torch.ones(5)], "n": 2}
    second = snapshot_to_host(live, first)
    assert second["w"].data_ptr() == first["w"].data_ptr() and torch.equal(second["w"], live["w"])
    assert second["b"][0].data_ptr() != live["b"][0].data_ptr() and torch.equal(second["b"][0], torch.ones(5))
    assert second["n"] == 2
    assert snapshot_to_host(live["w"].t(), first["w"]).data_ptr() != first["w"].data_ptr()  # other strides


def test_consecutive_saves_hold_their_own_values(tmp_path: Path) -> None:
    model = torch.nn.Linear(8, 8)
    state = spotrun.torch_state(model=model)
    with spotrun.Checkpointer(tmp_path, every_steps=1, keep_last=None, signals=()) as ckpt:
        for step in range(3):
            with torch.no_grad():
                model.weight.fill_(step)
            ckpt.step(state, step)
            ckpt.wait()
        for steps in (1, 2, 3):
            saved = ckpt.store.load_verified(ckpt.store.path(steps), ["shared.pt"])["shared.pt"]
            assert torch.equal(saved["model"]["weight"], torch.full((8, 8), float(steps - 1))), steps


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.M).group(1)) * 1024  # type: ignore[union-attr]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_peak_extra_memory_of_a_save_is_about_one_copy_of_the_state(tmp_path: Path) -> None:
    layers = [torch.nn.Linear(2048, 2048) for _ in range(STATE_BYTES // (2048 * 2048 * 4))]
    state = spotrun.torch_state(model=torch.nn.Sequential(*layers), rng=False)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_bytes())
            time.sleep(0.001)

    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        before = _rss_bytes()
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            ckpt.save(state, 0)
        finally:
            done.set()
            sampler.join()
    assert peak - before < 1.35 * STATE_BYTES  # the in-memory serialization this replaced took about 3 copies
