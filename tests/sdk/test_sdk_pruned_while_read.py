"""A checkpoint its writer prunes (keep_last) while another process reads it: `load_checkpoint`, a restore, and
`spotrun checkpoints list --verify` met a half-removed folder and called it damaged. It is "pruned meanwhile": skipped
without a warning, the newest one there is now read instead, and nothing is reported damaged. The writer's save and
pruning are run from inside the reader (between its listing and its read, or after it has read a manifest), so the
moment is the same at every run. The framework callbacks' resume (`TrainerCheckpoints`, `LightningCheckpoints`:
`foreign.newest_intact`) is held to the same."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

import spotrun
from spotrun.cli import checkpoint_folders
from spotrun.cli.main import app
from spotrun.sdk import foreign, layout, storage
from spotrun.sdk.hf_trainer import TrainerCheckpoints
from spotrun.sdk.lightning import CHECKPOINT_FILE, LightningCheckpoints


def state_filled(value: float) -> tuple[spotrun.TrainingState, torch.nn.Module]:
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(value)
    return spotrun.torch_state(model=model), model


def save(root: Path | str, steps_done: int, keep_last: int | None) -> None:
    """The writer: commits a checkpoint of ``steps_done`` steps (weights filled with it), then prunes to ``keep_last``
    (``close`` waits for the pruning)."""
    with spotrun.Checkpointer(root, keep_last=keep_last, signals=()) as writer:
        writer.save(state_filled(float(steps_done))[0], steps_done - 1)


@pytest.fixture
def no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checkpoint skipped as damaged is a CheckpointWarning
        yield


def once(action: Callable[[], None]) -> Callable[[], None]:
    done = []

    def run() -> None:
        if not done:
            done.append(True)
            action()

    return run


def after_listing(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """``action`` runs once, right after the reader has listed the checkpoints."""
    listed = storage.CheckpointStore.candidates
    action = once(action)

    def listing_then_action(store: storage.CheckpointStore) -> list[tuple[int, str]]:
        found = listed(store)
        action()
        return found

    monkeypatch.setattr(storage.CheckpointStore, "candidates", listing_then_action)


def after_manifest_read(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]) -> None:
    """``action`` runs once, right after the manifest of the checkpoint folder ``name`` has been read."""
    read = layout.read_manifest
    action = once(action)

    def read_then_action(fs: Any, path: str, **options: Any) -> dict[str, Any] | None:
        manifest = read(fs, path, **options)
        if path.rstrip("/").endswith(name):
            action()
        return manifest

    monkeypatch.setattr(layout, "read_manifest", read_then_action)


def test_load_checkpoint_reads_the_newest_one_when_those_it_listed_are_pruned_before_their_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    save(tmp_path, 1, keep_last=None)
    save(tmp_path, 2, keep_last=None)
    after_listing(monkeypatch, lambda: save(tmp_path, 3, keep_last=1))  # commits 3, prunes 1 and 2
    caplog.set_level(logging.INFO, logger="spotrun.sdk.reading")
    loaded = spotrun.load_checkpoint(tmp_path)
    assert loaded.steps == 3 and torch.equal(loaded.state["model"]["weight"], torch.full((3, 4), 3.0))
    assert "ckpt-000000000002 was pruned by its writer while it was read" in caplog.text


@pytest.mark.parametrize("on", ["disk", "object store"])
def test_load_checkpoint_takes_a_checkpoint_whose_files_vanish_after_its_manifest_for_pruned_not_damaged(
    on: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_warnings: None
) -> None:
    """On a disk pruning renames the folder away at once; in an object store it deletes the manifest, then the rest."""
    location = str(tmp_path) if on == "disk" else f"memory://bucket{tmp_path}"
    save(location, 1, keep_last=None)
    save(location, 2, keep_last=None)
    store = storage.open_store(location)
    after_manifest_read(monkeypatch, "ckpt-000000000002", lambda: store.remove(store.path(2)))
    loaded = spotrun.load_checkpoint(location)
    assert loaded.steps == 1 and torch.equal(loaded.state["model"]["weight"], torch.full((3, 4), 1.0))


def test_load_checkpoint_of_a_step_pruned_while_it_is_read_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(tmp_path, 1, keep_last=None)
    after_listing(monkeypatch, lambda: save(tmp_path, 2, keep_last=1))
    with pytest.raises(spotrun.CheckpointError, match="ckpt-000000000001 was pruned by its writer while it was read"):
        spotrun.load_checkpoint(tmp_path, step=1)


def test_a_restore_takes_the_newest_checkpoint_when_the_one_it_reads_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_warnings: None
) -> None:
    save(tmp_path, 1, keep_last=None)
    after_manifest_read(monkeypatch, "ckpt-000000000001", lambda: save(tmp_path, 2, keep_last=1))
    state, model = state_filled(0.0)
    with spotrun.Checkpointer(tmp_path, signals=()) as reader:
        assert reader.restore(state) == 2
        assert reader._skipped == set()  # not taken for damaged: nothing of it counts against pruning
    assert torch.equal(model.weight, torch.full((3, 4), 2.0))


def test_list_verify_does_not_call_a_checkpoint_pruned_while_it_is_verified_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(tmp_path, 1, keep_last=None)
    after_manifest_read(monkeypatch, "ckpt-000000000001", lambda: save(tmp_path, 2, keep_last=1))
    listed = CliRunner().invoke(app, ["checkpoints", "list", str(tmp_path), "--verify", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [row["state"] for row in json.loads(listed.stdout)] == [checkpoint_folders.PRUNED]


def test_list_does_not_call_a_checkpoint_pruned_after_the_listing_a_save_cut_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(tmp_path, 1, keep_last=None)
    listed = checkpoint_folders.folders

    def listing_then_pruned(fs: Any, root: str) -> list[tuple[int, str]]:
        found = listed(fs, root)
        save(tmp_path, 2, keep_last=1)
        return found

    monkeypatch.setattr(checkpoint_folders, "folders", listing_then_pruned)
    rows = json.loads(CliRunner().invoke(app, ["checkpoints", "list", str(tmp_path), "--json"]).stdout)
    assert [row["state"] for row in rows] == [checkpoint_folders.PRUNED]


FRAMEWORK_CALLBACKS = {  # the callback, and what its resume_from gives for a checkpoint's folder
    layout.TRAINER_PAYLOAD: (TrainerCheckpoints, lambda folder: folder),
    layout.LIGHTNING_PAYLOAD: (LightningCheckpoints, lambda folder: f"{folder}/{CHECKPOINT_FILE}"),
}


def save_foreign(root: Path, steps_done: int, keep_last: int | None, payload: str) -> None:
    """A framework callback as the writer: commits the framework's checkpoint of ``steps_done`` steps (one file
    holding the step count), then prunes to ``keep_last``."""
    written = root.parent / f"written-{steps_done}"
    written.mkdir()
    (written / "state.txt").write_text(str(steps_done))
    store = foreign.local_store(root, payload)
    try:
        foreign.commit(store, str(written), steps_done, payload=payload)
        if keep_last is not None:
            store.prune(steps_done, keep_last)
    finally:
        store.release()


@pytest.mark.parametrize("payload", FRAMEWORK_CALLBACKS)
def test_a_framework_resume_takes_the_newest_one_when_those_it_listed_are_pruned_before_their_check(
    payload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_warnings: None
) -> None:
    root = tmp_path / "store"
    save_foreign(root, 1, keep_last=None, payload=payload)
    save_foreign(root, 2, keep_last=None, payload=payload)
    after_listing(monkeypatch, lambda: save_foreign(root, 3, keep_last=1, payload=payload))  # commits 3, prunes 1, 2
    callback, resumed_file = FRAMEWORK_CALLBACKS[payload]
    spot = callback(root, signals=())
    assert spot.resume_from() == resumed_file(storage.open_store(str(root)).path(3))
    assert spot._skipped == set()  # not taken for damaged: nothing of it counts against pruning


@pytest.mark.parametrize("payload", FRAMEWORK_CALLBACKS)
def test_a_framework_resume_takes_a_checkpoint_whose_files_vanish_after_its_manifest_for_pruned_not_damaged(
    payload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Its writer commits a newer one and prunes the one being checked: the newer one is taken."""
    root = tmp_path / "store"
    save_foreign(root, 1, keep_last=None, payload=payload)
    after_manifest_read(monkeypatch, "ckpt-000000000001", lambda: save_foreign(root, 2, keep_last=1, payload=payload))
    caplog.set_level(logging.INFO, logger="spotrun.sdk.foreign")
    callback, resumed_file = FRAMEWORK_CALLBACKS[payload]
    spot = callback(root, signals=())
    assert spot.resume_from() == resumed_file(storage.open_store(str(root)).path(2))
    assert spot._skipped == set()
    assert "ckpt-000000000001 was pruned by its writer while it was read" in caplog.text
