"""Bad input on restore: a checkpoint of another shape names every mismatch and changes nothing; a folder
of broken checkpoints gives NoValidCheckpoint with the reason per candidate; garbage never crashes restore
with an unexpected exception type; nothing in the folder is deleted by a failed restore."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import spotrun
from spotrun.sdk import CheckpointWarning, IncompatibleCheckpoint, NoValidCheckpoint, layout

CKPT_1 = "ckpt-000000000001"
CKPT_2 = "ckpt-000000000002"
CKPT_3 = "ckpt-000000000003"


def training_state(hidden: int, *, groups: int = 1, batch_size: int = 4) -> tuple[spotrun.TrainingState, dict[str, Any]]:
    """A trained-for-two-steps state; components listed so that the model is loaded last (a partial load
    of the others before the model's error would show)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Linear(hidden, 3))
    params = list(model.parameters())
    param_groups = [{"params": params}] if groups == 1 else [{"params": params[:2]}, {"params": params[2:]}]
    optimizer = torch.optim.Adam(param_groups, lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    sampler = spotrun.ResumableSampler(40, batch_size=batch_size, seed=1)
    batches = sampler.stream()
    for _ in range(2):
        next(batches)
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    parts = {"sampler": sampler, "scheduler": scheduler, "optimizer": optimizer, "model": model}
    return spotrun.torch_state(**parts), parts


def everything(parts: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of every component's state and of the global RNG states."""
    captured = {name: component.state_dict() for name, component in parts.items()}
    captured["rng"] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    buffer = io.BytesIO()
    torch.save(captured, buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)


def assert_same(before: Any, after: Any, where: str = "state") -> None:
    if isinstance(before, torch.Tensor):
        assert isinstance(after, torch.Tensor) and before.shape == after.shape and torch.equal(before, after), where
    elif isinstance(before, dict):
        assert before.keys() == after.keys(), where
        for key in before:
            assert_same(before[key], after[key], f"{where}.{key}")
    elif isinstance(before, list | tuple):
        assert type(before) is type(after) and len(before) == len(after), where
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            assert_same(old, new, f"{where}[{index}]")
    elif isinstance(before, np.ndarray):
        assert np.array_equal(before, after), where
    else:
        assert before == after, where


def folder_contents(root: Path) -> dict[str, bytes | None]:
    return {str(path.relative_to(root)): path.read_bytes() if path.is_file() else None for path in root.rglob("*")}


def save(root: Path, state: spotrun.TrainingState, steps: list[int], keep_last: int | None = None) -> None:
    with spotrun.Checkpointer(root, signals=(), keep_last=keep_last) as ckpt:
        for step in steps:
            ckpt.save(state, step)


def restore(root: Path, state: spotrun.TrainingState) -> int | None:
    with spotrun.Checkpointer(root, signals=()) as ckpt:
        return ckpt.restore(state)


# -- a checkpoint of another shape ---------------------------------------------------------------------------


def test_other_model_shape_names_every_mismatch_and_changes_nothing(tmp_path: Path) -> None:
    save(tmp_path, training_state(hidden=8)[0], [1])
    state, parts = training_state(hidden=6)
    before, files = everything(parts), folder_contents(tmp_path)

    with pytest.raises(IncompatibleCheckpoint) as raised:
        restore(tmp_path, state)

    message = str(raised.value)
    assert CKPT_2 in message and "nothing was loaded" in message
    assert "model.0.weight: shape (8, 4) in the checkpoint, (6, 4) here" in message
    assert "model.0.bias: shape (8,) in the checkpoint, (6,) here" in message
    assert "model.1.weight: shape (3, 8) in the checkpoint, (3, 6) here" in message
    assert "model.1.bias" not in message  # same shape in both
    assert_same(before, everything(parts))
    assert folder_contents(tmp_path) == files


def test_missing_and_extra_model_keys_are_named(tmp_path: Path) -> None:
    save(tmp_path, spotrun.torch_state(model=torch.nn.Linear(2, 2)), [0])
    model = torch.nn.Linear(2, 2, bias=False)
    model.register_buffer("scale", torch.ones(1))
    weight = model.weight.detach().clone()
    with pytest.raises(IncompatibleCheckpoint) as raised:
        restore(tmp_path, spotrun.torch_state(model=model))
    assert "model.scale: missing from the checkpoint" in str(raised.value)
    assert "model.bias: in the checkpoint, not in this model" in str(raised.value)
    assert torch.equal(model.weight, weight)


def test_other_optimizer_groups_change_nothing(tmp_path: Path) -> None:
    save(tmp_path, training_state(hidden=8, groups=2)[0], [1])
    state, parts = training_state(hidden=8, groups=1)
    before = everything(parts)
    with pytest.raises(IncompatibleCheckpoint, match="optimizer: 2 parameter groups in the checkpoint, 1 here"):
        restore(tmp_path, state)
    assert_same(before, everything(parts))


def test_another_optimizer_class_is_named_and_the_folder_kept(tmp_path: Path) -> None:
    # the shapes fit, so only the optimizer's own load finds out: Adam's raised a bare KeyError: 'step'
    model = torch.nn.Linear(4, 3)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    sgd.step()
    save(tmp_path, spotrun.torch_state(model=model, optimizer=sgd), [0])
    files = folder_contents(tmp_path)
    model = torch.nn.Linear(4, 3)
    with pytest.raises(IncompatibleCheckpoint) as raised:
        restore(tmp_path, spotrun.torch_state(model=model, optimizer=torch.optim.Adam(model.parameters())))
    message = str(raised.value)
    assert CKPT_1 in message and "optimizer (Adam)" in message and "KeyError" in message
    assert "already loaded: ['model']" in message
    assert folder_contents(tmp_path) == files


def test_other_sampler_configuration_changes_nothing(tmp_path: Path) -> None:
    save(tmp_path, training_state(hidden=8, batch_size=4)[0], [1])
    state, parts = training_state(hidden=8, batch_size=5)
    before = everything(parts)
    with pytest.raises(IncompatibleCheckpoint, match="sampler: the checkpoint was made with batch_size=4, this sampler has batch_size=5"):
        restore(tmp_path, state)
    assert_same(before, everything(parts))


def test_a_fitting_checkpoint_still_restores_every_component(tmp_path: Path) -> None:
    saved_state, saved_parts = training_state(hidden=8)
    save(tmp_path, saved_state, [1])
    expected = everything(saved_parts)
    state, parts = training_state(hidden=8)
    assert restore(tmp_path, state) == 2
    restored = everything(parts)
    del expected["rng"], restored["rng"]
    assert_same(expected, restored)


# -- candidates that do not verify -------------------------------------------------------------------------


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_no_valid_checkpoint_lists_each_candidate_with_its_reason_and_deletes_nothing(tmp_path: Path) -> None:
    save(tmp_path, training_state(hidden=8)[0], [0, 1, 2])
    flip_a_byte(tmp_path / CKPT_1 / "shared.pt")
    (tmp_path / CKPT_2 / "rank-00000.pt").unlink()
    (tmp_path / CKPT_3 / layout.MANIFEST_NAME).write_bytes(b"\xff\xfe\x00not utf-8 \x80")
    (tmp_path / "ckpt-000000000009").mkdir()  # a save that died before its manifest: not a candidate
    (tmp_path / ".staging-ckpt-000000000010").mkdir()  # leftovers are kept too when restore fails
    state, parts = training_state(hidden=8)
    before, files = everything(parts), folder_contents(tmp_path)

    with pytest.raises(NoValidCheckpoint) as raised:
        restore(tmp_path, state)

    lines = str(raised.value).splitlines()
    assert lines[0].startswith(f"no valid checkpoint in file://{tmp_path}")
    reasons = [line.strip() for line in lines[1:]]
    assert reasons == [
        f"{tmp_path}/{CKPT_3}: no readable {layout.MANIFEST_NAME}",
        f"{tmp_path}/{CKPT_2}: rank-00000.pt cannot be read" + reasons[1].split("cannot be read", 1)[1],
        f"{tmp_path}/{CKPT_1}: shared.pt does not match its size/checksum in the manifest",
    ]
    assert_same(before, everything(parts))
    assert folder_contents(tmp_path) == files


def test_only_half_written_folders_mean_nothing_to_restore(tmp_path: Path) -> None:
    (tmp_path / CKPT_1).mkdir()
    (tmp_path / CKPT_1 / "shared.pt").write_bytes(b"half")
    assert restore(tmp_path, training_state(hidden=8)[0]) is None


def test_newest_corrupt_falls_back_to_an_older_valid_one_with_a_warning(tmp_path: Path) -> None:
    save(tmp_path, training_state(hidden=8)[0], [0, 1])
    (tmp_path / CKPT_2 / layout.MANIFEST_NAME).write_bytes(b"\x80garbage")
    with pytest.warns(CheckpointWarning, match=f"{CKPT_2}: no readable"):
        assert restore(tmp_path, training_state(hidden=8)[0]) == 1


# -- garbage in the folder -----------------------------------------------------------------------------------


def manifest_for(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / layout.MANIFEST_NAME).write_bytes(layout.encode_manifest(layout.build_manifest(1, files)))


def torch_bytes(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


CANDIDATE_GARBAGE: dict[str, Callable[[Path], None]] = {
    "manifest is a JSON list": lambda root: _with_manifest_text(root, "[]"),
    "manifest lists no files": lambda root: _with_manifest_text(root, json.dumps({"files": {}})),
    "manifest entry is not a dict": lambda root: _with_manifest_text(root, json.dumps({"files": {"shared.pt": "x"}})),
    "manifest is empty": lambda root: _with_manifest_text(root, ""),
    "verified bytes that are not a torch file": lambda root: manifest_for(root / CKPT_1, {"shared.pt": b"\x00" * 100}),
    "verified torch file that is not a dict": lambda root: manifest_for(root / CKPT_1, {"shared.pt": torch_bytes([1])}),
    "verified dict of unknown components": lambda root: manifest_for(
        root / CKPT_1, {"shared.pt": torch_bytes({"stranger": {}})}
    ),
    "verified model entry that is not a state dict": lambda root: manifest_for(
        root / CKPT_1, {"shared.pt": torch_bytes({"model": 3})}
    ),
}


def _with_manifest_text(root: Path, text: str) -> None:
    (root / CKPT_1).mkdir()
    (root / CKPT_1 / layout.MANIFEST_NAME).write_text(text)


@pytest.mark.parametrize("make", CANDIDATE_GARBAGE.values(), ids=CANDIDATE_GARBAGE.keys())
def test_a_garbage_candidate_gives_a_checkpoint_error(tmp_path: Path, make: Callable[[Path], None]) -> None:
    make(tmp_path)
    model = torch.nn.Linear(4, 3)
    weight = model.weight.detach().clone()
    files = folder_contents(tmp_path)
    with pytest.raises(spotrun.CheckpointError, match=CKPT_1) as raised:
        restore(tmp_path, spotrun.torch_state(model=model, rng=False))
    assert isinstance(raised.value, NoValidCheckpoint | IncompatibleCheckpoint)
    assert torch.equal(model.weight, weight)
    assert folder_contents(tmp_path) == files


def test_garbage_that_is_no_candidate_means_nothing_to_restore(tmp_path: Path) -> None:
    (tmp_path / CKPT_1).write_bytes(b"a file named like a checkpoint")
    (tmp_path / "ckpt-12").mkdir()
    (tmp_path / "ckpt-12" / layout.MANIFEST_NAME).write_text("{}")  # not a checkpoint name
    (tmp_path / "random.bin").write_bytes(bytes(range(256)))
    (tmp_path / CKPT_2).mkdir()
    (tmp_path / CKPT_2 / layout.MANIFEST_NAME).mkdir()  # a folder where the manifest should be
    files = folder_contents(tmp_path)
    assert restore(tmp_path, training_state(hidden=8)[0]) is None
    assert folder_contents(tmp_path) == files


# -- no pruning before a new checkpoint commits ------------------------------------------------------------


def test_corrupt_candidates_survive_until_a_new_checkpoint_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save(tmp_path, training_state(hidden=8)[0], [0, 1])
    flip_a_byte(tmp_path / CKPT_1 / "shared.pt")
    flip_a_byte(tmp_path / CKPT_2 / "shared.pt")
    corrupt = folder_contents(tmp_path)
    state = training_state(hidden=8)[0]
    with spotrun.Checkpointer(tmp_path, signals=(), keep_last=1) as ckpt:
        with pytest.raises(NoValidCheckpoint):
            ckpt.restore(state)

        def disk_full(*args: object) -> None:
            raise OSError("no space left on device")

        with monkeypatch.context() as patched:
            patched.setattr(ckpt.store, "write_payload", disk_full)
            with pytest.raises(spotrun.CheckpointError, match="no space left"):
                ckpt.save(state, 4)
        assert {name: data for name, data in folder_contents(tmp_path).items() if "staging" not in name} == corrupt
        ckpt.save(state, 4)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ckpt-000000000005"]
