"""Where a restore's time goes: one checkpoint (by default ~1 GiB, the checkpoint benchmark's state) saved once, then restored
``--repeats`` times into the live model and optimizer, each time with the files dropped from the page cache, beside
an O_DIRECT raw read of the same payload file. For each restore it prints the whole restore, the time spent loading
the decoded state into the model and optimizer (``TrainingState.load_state_dict``) and the time spent reading the
small storages (those read the ordinary way, not with O_DIRECT).

    python benchmarks/restore_breakdown.py --repeats 5 --dir /tmp/restore-breakdown

It times private functions by wrapping them, so it reads the SDK as it is in the tree it runs against (set
PYTHONPATH to another checkout's src/ to measure that one). A diagnostic, not a target.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checkpoint as bench  # noqa: E402  (the checkpoint benchmark's state and disk helpers)

import spotrun  # noqa: E402
from spotrun.sdk import state as sdk_state  # noqa: E402
from spotrun.sdk import tensorfile  # noqa: E402


class Timer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner: Any, name: str, label: str, only: Callable[..., bool] = lambda *a: True) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if only(*args):
                    self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=1.0, help="training state size (model + Adam state)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/restore-breakdown"))
    args = parser.parse_args(argv)
    root = args.dir / "checkpoints"
    bench.clear(root)
    training = bench.build_training(int(args.size_gib * bench.GIB))
    with spotrun.Checkpointer(root, keep_last=1, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=training.model, optimizer=training.optimizer), 1)
    payload = next(root.glob("ckpt-*/shared.pt"))
    timer = Timer()
    timer.wrap(sdk_state.TrainingState, "load_state_dict", "load into state")
    timer.wrap(tensorfile, "_read_slot", "small storages", only=lambda fh, slot, *rest: slot.region is None)
    print(f"state {training.state_bytes / bench.GIB:.3f} GiB; seconds per restore")
    print(f"{'raw O_DIRECT':>13}{'restore':>9}{'ratio':>7}{'load into state':>17}{'small storages':>16}")
    for _ in range(args.repeats):
        bench.drop_from_page_cache(payload)
        raw = bench.raw_read_direct(payload) or float("nan")
        for file in root.rglob("*"):
            if file.is_file():
                bench.drop_from_page_cache(file)
        gc.collect()
        timer.seconds.clear()
        start = time.perf_counter()
        with spotrun.Checkpointer(root, keep_last=1, signals=()) as ckpt:
            ckpt.restore(spotrun.torch_state(model=training.model, optimizer=training.optimizer))
        restore = time.perf_counter() - start
        print(
            f"{raw:>13.3f}{restore:>9.3f}{raw / restore:>7.2f}{timer.seconds.get('load into state', 0):>17.3f}"
            f"{timer.seconds.get('small storages', 0):>16.4f}"
        )
    bench.clear(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
