"""examples/digits/train.py: deterministic, and a preempted + resumed run ends with the same weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from spotrun.sdk import PREEMPTED_EXIT_CODE

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "digits" / "train.py"
EPOCHS = 3


def _environment(checkpoint_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "EPOCHS": str(EPOCHS),
        "STEP_SECONDS": "0.01",
        "CHECKPOINT_EVERY": "5",
        "SPOTRUN_CHECKPOINT_DIR": str(checkpoint_dir),
    }


def _final(checkpoint_dir: Path) -> dict[str, object]:
    return json.loads((checkpoint_dir / "final.json").read_text())


def test_digits_example_is_deterministic_across_a_preemption(tmp_path: Path) -> None:
    uninterrupted = subprocess.Popen([sys.executable, str(TRAIN)], env=_environment(tmp_path / "a"), stdout=subprocess.DEVNULL)

    preempted = subprocess.Popen(
        [sys.executable, str(TRAIN)], env=_environment(tmp_path / "b"), stdout=subprocess.PIPE, text=True
    )
    assert preempted.stdout is not None
    assert preempted.stdout.readline().startswith("starting at step 0 ")
    assert preempted.stdout.readline().startswith("epoch 0 step 0 loss")  # training has begun
    preempted.send_signal(signal.SIGTERM)
    preempted.stdout.read()
    assert preempted.wait(timeout=60) == PREEMPTED_EXIT_CODE
    resumed = subprocess.run(
        [sys.executable, str(TRAIN)], env=_environment(tmp_path / "b"), capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    first_line = resumed.stdout.splitlines()[0]
    assert not first_line.startswith("starting at step 0 "), first_line
    assert "test accuracy" in resumed.stdout.splitlines()[-1]
    assert uninterrupted.wait(timeout=120) == 0

    reference, result = _final(tmp_path / "a"), _final(tmp_path / "b")
    assert result["sha256"] == reference["sha256"]
    assert len(str(result["sha256"])) == 64
    assert result["steps"] == reference["steps"] == EPOCHS * 23  # 1437 training digits, batches of 64
    assert 0.5 < float(result["accuracy"]) <= 1.0  # type: ignore[arg-type]
    # the training loop's own time, which the demo takes for the job's: every step's sleep, and no process start
    assert float(reference["train_seconds"]) >= EPOCHS * 23 * 0.01  # type: ignore[arg-type]
    assert float(result["train_seconds"]) > 0  # type: ignore[arg-type]


def _example_module():
    """examples/digits/train.py as a module of this process (its functions, not its training)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("digits_train", TRAIN)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_the_examples_saved_split_is_scikit_learns_split(tmp_path: Path, monkeypatch) -> None:
    """Trainers load the split saved by the first one (no scikit-learn import at each restart): the same arrays,
    dtypes included, as splitting scikit-learn's digits afresh."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    example = _example_module()
    monkeypatch.setattr(example, "SPLIT_FILE", tmp_path / ".data" / "split.npz")
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        (digits.data / 16.0).astype(np.float32), digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    for load in ("saves it", "reads it back"):
        loaded = [tensor.numpy() for tensor in example.load_data()]
        for got, expected in zip(loaded, (x_train, y_train, x_test, y_test), strict=True):
            assert got.dtype == expected.dtype and np.array_equal(got, expected), load
    assert sorted(p.name for p in (tmp_path / ".data").iterdir()) == ["split.npz"]  # no partial file left


def test_the_example_trains_where_it_cannot_save_its_split(tmp_path: Path, monkeypatch, capsys) -> None:
    example = _example_module()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(example, "SPLIT_FILE", blocked / ".data" / "split.npz")  # its folder cannot be made
    x_train, y_train, x_test, y_test = example.load_data()
    assert (len(x_train), len(x_test)) == (1437, 360)
    assert "could not save the split to" in capsys.readouterr().out
