"""Checkpointer behaviour in one process: restore fallback, keep-last-N, the stop protocol, errors."""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch

import spotrun
from spotrun.sdk import (
    PREEMPTED_EXIT_CODE, CheckpointWarning, NoValidCheckpoint, PreemptionFlag, layout, storage, tensorfile,
)


def make_state(fill: float | None = None) -> tuple[spotrun.TrainingState, torch.nn.Module, dict[str, object]]:
    model = torch.nn.Linear(4, 3)
    if fill is not None:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(fill)
    extra: dict[str, object] = {"note": f"filled with {fill}", "tensor": torch.arange(3)}
    return spotrun.torch_state(model=model, extra=extra), model, extra


def save_steps(root: Path, steps: list[int], **options: object) -> None:
    with spotrun.Checkpointer(root, signals=(), **options) as ckpt:  # type: ignore[arg-type]
        for step in steps:
            ckpt.save(make_state(fill=step)[0], step)


def restore(root: Path) -> tuple[int | None, torch.nn.Module, dict[str, object]]:
    state, model, extra = make_state()
    with spotrun.Checkpointer(root, signals=()) as ckpt:
        return ckpt.restore(state), model, extra


def folders(root: Path) -> list[str]:
    return sorted(os.listdir(root))


def test_restore_without_checkpoint_returns_none(tmp_path: Path) -> None:
    assert restore(tmp_path)[0] is None


def test_restore_returns_steps_done_and_fills_state_in_place(tmp_path: Path) -> None:
    save_steps(tmp_path, [4])  # the 0-based index of the step just done
    steps, model, extra = restore(tmp_path)
    assert steps == 5
    assert folders(tmp_path) == ["ckpt-000000000005"]
    assert torch.equal(model.weight, torch.full((3, 4), 4.0))
    assert extra["note"] == "filled with 4"
    assert torch.equal(extra["tensor"], torch.arange(3))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda path: path.write_bytes(b"x" + path.read_bytes()[1:]), id="flipped-byte"),
        pytest.param(lambda path: path.write_bytes(path.read_bytes()[:-10]), id="truncated"),
        pytest.param(lambda path: path.unlink(), id="missing"),
    ],
)
def test_corrupt_newest_falls_back_with_warning(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    save_steps(tmp_path, [0, 1], keep_last=3)
    damage(tmp_path / "ckpt-000000000002" / "shared.pt")
    with pytest.warns(CheckpointWarning, match="ckpt-000000000002"):
        steps, model, _ = restore(tmp_path)
    assert steps == 1
    assert torch.equal(model.weight, torch.full((3, 4), 0.0))


def test_checkpoints_skipped_as_damaged_do_not_take_the_place_of_intact_ones(tmp_path: Path) -> None:
    save_steps(tmp_path, [0, 1], keep_last=2)
    (tmp_path / "ckpt-000000000002" / "shared.pt").write_bytes(b"garbage")
    state = make_state()[0]
    with spotrun.Checkpointer(tmp_path, keep_last=2, signals=()) as ckpt:
        with pytest.warns(CheckpointWarning, match="ckpt-000000000002"):
            assert ckpt.restore(state) == 1
        assert folders(tmp_path) == ["ckpt-000000000001", "ckpt-000000000002"]  # restore deletes nothing
        ckpt.save(state, 2)  # not step 1's save: the damaged one is not replaced
    assert folders(tmp_path) == ["ckpt-000000000001", "ckpt-000000000003"]  # two intact ones, as keep_last says


def test_every_checkpoint_corrupt_raises_no_valid_checkpoint(tmp_path: Path) -> None:
    save_steps(tmp_path, [0])
    (tmp_path / "ckpt-000000000001" / "rank-00000.pt").write_bytes(b"garbage")
    with pytest.raises(NoValidCheckpoint, match="ckpt-000000000001: rank-00000.pt does not match"):
        restore(tmp_path)


def test_uncommitted_folders_are_ignored_silently_and_cleaned(tmp_path: Path) -> None:
    save_steps(tmp_path, [0])
    (tmp_path / "ckpt-000000000009").mkdir()  # a save that died before its manifest
    (tmp_path / "ckpt-000000000009" / "shared.pt").write_bytes(b"half")
    (tmp_path / ".staging-ckpt-000000000010").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert restore(tmp_path)[0] == 1
    assert ".staging-ckpt-000000000010" not in folders(tmp_path)


def test_keep_last_removes_old_and_partial_after_commit(tmp_path: Path) -> None:
    (tmp_path / "ckpt-000000000003").mkdir()  # partial, older than the saves below
    save_steps(tmp_path, [0, 1, 2, 3, 4], keep_last=2)
    assert folders(tmp_path) == ["ckpt-000000000004", "ckpt-000000000005"]
    save_steps(tmp_path, [5, 6], keep_last=None)
    assert len(folders(tmp_path)) == 4
    save_steps(tmp_path, [7], keep_last=6)  # fewer checkpoints than it may keep: all stay
    assert len(folders(tmp_path)) == 5
    save_steps(tmp_path, [8], keep_last=1)
    assert folders(tmp_path) == ["ckpt-000000000009"]


def test_same_step_saved_again_replaces_the_old_one(tmp_path: Path) -> None:
    save_steps(tmp_path, [2])
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(make_state(fill=7.0)[0], 2)
    steps, model, _ = restore(tmp_path)
    assert steps == 3
    assert torch.equal(model.weight, torch.full((3, 4), 7.0))


def test_a_replacement_cut_short_between_its_two_renames_keeps_the_new_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_between_renames
) -> None:
    # where the filesystem cannot swap two folders at once, the old checkpoint of the step goes to the trash, then the
    # new one is renamed into place: a kill in between leaves the new one complete, manifest and all, in staging
    save_steps(tmp_path, [2])
    kill_between_renames()
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        with pytest.raises(spotrun.CheckpointError, match="killed"):
            ckpt.save(make_state(fill=7.0)[0], 2)
    monkeypatch.undo()
    steps, model, _ = restore(tmp_path)  # which removed the staging and trash folders: both copies, before
    assert steps == 3
    assert torch.equal(model.weight, torch.full((3, 4), 7.0))


def test_periodic_saves_every_n_steps(tmp_path: Path) -> None:
    state = make_state(fill=1.0)[0]
    with spotrun.Checkpointer(tmp_path, every_steps=3, keep_last=None, signals=()) as ckpt:
        for step in range(7):
            ckpt.step(state, step)
            ckpt.wait()
    assert folders(tmp_path) == ["ckpt-000000000003", "ckpt-000000000006"]


def test_periodic_saves_every_n_seconds(tmp_path: Path) -> None:
    state = make_state(fill=1.0)[0]
    with spotrun.Checkpointer(tmp_path, every_seconds=3600, signals=()) as ckpt:
        ckpt.step(state, 0)
        ckpt.wait()
        assert folders(tmp_path) == []
    with spotrun.Checkpointer(tmp_path, every_seconds=0.01, signals=()) as ckpt:
        time.sleep(0.02)
        ckpt.step(state, 0)
        ckpt.wait()
        assert folders(tmp_path) == ["ckpt-000000000001"]


def test_stop_request_saves_synchronously_then_exits_75(tmp_path: Path) -> None:
    flag = PreemptionFlag()
    state = make_state(fill=3.0)[0]
    with spotrun.Checkpointer(tmp_path, every_steps=1000, signals=(), flag=flag) as ckpt:
        ckpt.step(state, 0)
        ckpt.exit_if_stopped()  # no stop yet: returns
        assert not ckpt.should_stop
        flag.request()
        ckpt.step(state, 1)
        assert ckpt.should_stop
        assert [s for s, _ in layout.list_committed(ckpt.fs, ckpt.root)] == [2]  # committed before step returned
        with pytest.raises(SystemExit) as exited:
            ckpt.exit_if_stopped()
    assert exited.value.code == PREEMPTED_EXIT_CODE == 75


def test_signal_only_sets_the_flag(tmp_path: Path) -> None:
    flag = PreemptionFlag()
    with spotrun.Checkpointer(tmp_path, signals=(signal.SIGUSR1,), flag=flag):
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert flag.is_set and flag.signal_received == signal.SIGUSR1
        finally:
            flag.uninstall()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every_steps"):
        spotrun.Checkpointer(tmp_path, every_steps=0, signals=())
    with pytest.raises(ValueError, match="keep_last"):
        spotrun.Checkpointer(tmp_path, keep_last=0, signals=())
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt, pytest.raises(TypeError, match="torch_state"):
        ckpt.save(torch.nn.Linear(2, 2), 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'optimizer'"):
        spotrun.torch_state(optimizer=object())
    with pytest.raises(TypeError, match="rng must be"):
        spotrun.torch_state(rng={})


def test_a_file_given_as_the_location_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file")  # makedirs said only "[Errno 17] File exists"
    with pytest.raises(NotADirectoryError, match="notes.txt is a file: give a folder"):
        spotrun.Checkpointer(tmp_path / "notes.txt", signals=())
    assert (tmp_path / "notes.txt").read_text() == "a file"


@pytest.mark.parametrize("make_index", [np.int64, torch.tensor], ids=["numpy", "tensor"])
def test_a_step_counted_by_numpy_or_torch_saves_like_an_int(tmp_path: Path, make_index: object) -> None:
    # a 0-d tensor or NumPy integer passes as an index, and failed at the commit: "int64 is not JSON serializable"
    state = make_state(fill=1.0)[0]
    with spotrun.Checkpointer(tmp_path, signals=(), every_steps=2) as ckpt:
        ckpt.step(state, make_index(1))  # type: ignore[operator]
        ckpt.save(state, make_index(3))  # type: ignore[operator]
    assert folders(tmp_path) == ["ckpt-000000000002", "ckpt-000000000004"]
    assert restore(tmp_path)[0] == 4


def test_a_step_behind_the_restored_or_saved_ones_is_refused_and_the_checkpoints_kept(tmp_path: Path) -> None:
    # a loop started at 0 after a restore (its return value dropped), or steps counted within each epoch: the first
    # save pruned every newer checkpoint as a later timeline, and the progress they held was gone without a word
    save_steps(tmp_path, [58, 59])
    state = make_state()[0]
    with spotrun.Checkpointer(tmp_path, signals=(), every_steps=10) as ckpt:
        assert ckpt.restore(state) == 60
        with pytest.raises(ValueError, match=r"step 9 .* 60 steps .*ckpt.restore\(state\)"):
            ckpt.step(state, 9)
        with pytest.raises(ValueError, match="step 9 "):
            ckpt.save(state, 9)
        assert folders(tmp_path) == ["ckpt-000000000059", "ckpt-000000000060"]
        ckpt.step(state, 60)  # where the restored run goes on
        ckpt.save(state, 69)
        with pytest.raises(ValueError, match="step 0 .* 70 steps"):
            ckpt.step(state, 0)
    assert folders(tmp_path) == ["ckpt-000000000060", "ckpt-000000000070"]


def test_location_defaults_to_the_agent_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTRUN_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    with spotrun.Checkpointer(signals=()) as ckpt:
        assert ckpt.root == str(tmp_path / "from-env")


def test_a_local_path_with_double_colons_is_a_folder_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # fsspec takes "::" for the joint of a chained URL: both runs went to tmp_path/"lr", one over the other
    save_steps(tmp_path / "lr::0.1", [0])
    save_steps(tmp_path / "lr::0.2", [1, 2])
    assert folders(tmp_path) == ["lr::0.1", "lr::0.2"]
    assert restore(tmp_path / "lr::0.1")[0] == 1
    assert spotrun.load_checkpoint(tmp_path / "lr::0.2").steps == 3
    monkeypatch.chdir(tmp_path)
    save_steps(Path("relative::run"), [4])  # a relative one too
    assert folders(tmp_path / "relative::run") == ["ckpt-000000000005"]
    assert type(storage.url_to_fs(f"simplecache::file://{tmp_path}")[0]).__name__ == "SimpleCacheFileSystem"


def test_restores_rng_states(tmp_path: Path) -> None:
    import random

    state = spotrun.torch_state(extra={})
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(state, 0)
        expected = (random.random(), float(np.random.rand()), torch.rand(1))
        ckpt.restore(state)
    assert (random.random(), float(np.random.rand())) == expected[:2]
    assert torch.equal(torch.rand(1), expected[2])


class FakeCuda:
    """torch.cuda's RNG functions for ``devices`` devices, each state a tensor (no GPU in CI: this checks what the
    SDK does with them, not CUDA itself)."""

    def __init__(self, devices: int, seed: int) -> None:
        self.states = [torch.full((8,), seed + device, dtype=torch.uint8) for device in range(devices)]

    def install(self, patch: pytest.MonkeyPatch) -> None:
        patch.setattr(torch.cuda, "is_available", lambda: True)
        patch.setattr(torch.cuda, "is_initialized", lambda: True)
        patch.setattr(torch.cuda, "device_count", lambda: len(self.states))
        patch.setattr(torch.cuda, "get_rng_state_all", lambda: [state.clone() for state in self.states])
        patch.setattr(torch.cuda, "set_rng_state", self.set_rng_state)

    def set_rng_state(self, state: torch.Tensor, device: int) -> None:
        self.states[device] = state.clone()


@pytest.mark.parametrize("devices_then, devices_now", [(2, 2), (2, 1), (1, 2)])
def test_cuda_rng_states_are_saved_per_device_and_restored_on_the_devices_there_are(
    tmp_path: Path, devices_then: int, devices_now: int
) -> None:
    state = spotrun.torch_state(extra={})
    with pytest.MonkeyPatch.context() as patch, spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        FakeCuda(devices_then, seed=10).install(patch)
        ckpt.save(state, 0)
    now = FakeCuda(devices_now, seed=50)
    with pytest.MonkeyPatch.context() as patch, spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        now.install(patch)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ckpt.restore(state)
    shared = min(devices_then, devices_now)
    restored_then = [10 + device for device in range(shared)]
    untouched = [50 + device for device in range(shared, devices_now)]
    assert [int(s[0]) for s in now.states] == restored_then + untouched
    mismatch = [w for w in caught if issubclass(w.category, spotrun.CheckpointWarning) and "CUDA" in str(w.message)]
    assert bool(mismatch) == (devices_then != devices_now)


def test_weights_sha256_covers_names_and_bytes() -> None:
    model = torch.nn.Linear(2, 2)
    same = torch.nn.Linear(2, 2)
    same.load_state_dict(model.state_dict())
    assert spotrun.weights_sha256(model) == spotrun.weights_sha256(same.state_dict())
    with torch.no_grad():
        same.bias[0] += 1e-7
    assert spotrun.weights_sha256(model) != spotrun.weights_sha256(same)
    renamed = {f"x.{name}": tensor for name, tensor in model.state_dict().items()}
    assert spotrun.weights_sha256(renamed) != spotrun.weights_sha256(model)


def test_restoring_into_a_different_set_of_components(tmp_path: Path) -> None:
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=torch.nn.Linear(2, 2), extra={"a": 1}), 0)
        with pytest.raises(KeyError, match="'extra'"):
            ckpt.restore(spotrun.torch_state(model=torch.nn.Linear(2, 2)))
        scaler = torch.amp.GradScaler("cpu")
        with pytest.warns(UserWarning, match="'scaler'"):
            ckpt.restore(spotrun.torch_state(model=torch.nn.Linear(2, 2), extra={}, scaler=scaler))


def test_a_second_signal_after_the_stop_cannot_kill_the_exit(tmp_path: Path) -> None:
    flag = PreemptionFlag()
    state = make_state(fill=1.0)[0]
    try:
        with spotrun.Checkpointer(tmp_path, every_steps=1000, signals=(signal.SIGUSR1,), flag=flag) as ckpt:
            os.kill(os.getpid(), signal.SIGUSR1)  # the notice
            ckpt.step(state, 0)
            with pytest.raises(SystemExit):
                ckpt.exit_if_stopped()
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGUSR1)  # e.g. the agent stopping every rank: ignored, the exit goes on
    finally:
        flag.uninstall()
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def test_tensors_in_a_user_dict_are_restored_into_the_tensors_the_program_holds(tmp_path: Path) -> None:
    """A learnable tensor kept in `extra` and trained by an optimizer: restoring swapped in a new tensor, so the
    optimizer went on from the initial value (and the dict's copy lost requires_grad)."""
    log_temp = torch.zeros((), requires_grad=True)
    moments = {"mean": torch.zeros(3)}
    extra = {"log_temp": log_temp, "moments": moments, "resized": torch.zeros(2), "gone": 1}
    optimizer = torch.optim.SGD([log_temp], lr=0.5)
    state = spotrun.torch_state(optimizer=optimizer, extra=extra)
    log_temp.grad = torch.tensor(1.0)
    optimizer.step()
    moments["mean"] += 2
    saved = {"log_temp": log_temp.detach().clone(), "mean": moments["mean"].clone()}
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(state, 0)
    with torch.no_grad():
        log_temp.fill_(7.0)
    moments["mean"].fill_(9.0)
    held_mean = moments["mean"]
    extra["resized"], extra["new"] = torch.zeros(5), "added since"
    del extra["gone"]

    assert spotrun.Checkpointer(tmp_path, signals=()).restore(state) == 1
    assert extra["log_temp"] is log_temp and log_temp.requires_grad and torch.equal(log_temp.detach(), saved["log_temp"])
    assert extra["moments"] is moments and moments["mean"] is held_mean and torch.equal(held_mean, saved["mean"])
    assert extra["resized"].shape == (2,) and extra["gone"] == 1 and "new" not in extra  # as saved


def _accumulating_run(root: Path, micro_batches: int, stop_after: int | None = None) -> tuple[torch.nn.Module, int]:
    """Micro-batches of one sample, an optimizer step every 3, `ckpt.step` after each micro-batch; a stop asked
    after micro-batch `stop_after`. The model, and the micro-batches this run did."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = spotrun.torch_state(model=model, optimizer=optimizer, rng=False)
    data = torch.arange(3.0 * micro_batches).reshape(micro_batches, 3) / micro_batches
    flag, done = PreemptionFlag(), 0
    with spotrun.Checkpointer(root, signals=(), flag=flag) as ckpt:
        start = ckpt.restore(state) or 0
        for step in range(start, micro_batches):
            (model(data[step]).pow(2).sum() / 3).backward()
            if (step + 1) % 3 == 0:
                optimizer.step()
                optimizer.zero_grad()
            done += 1
            if stepped_and_stopped(ckpt, state, flag, step, stop_after):
                break
    return model, done


def stepped_and_stopped(ckpt, state, flag: PreemptionFlag, step: int, stop_after: int | None) -> bool:
    """The loop's end of a step: the notice asked after step `stop_after`, then `ckpt.step`; whether to stop."""
    if step == stop_after:
        flag.request()
    ckpt.step(state, step)
    return ckpt.should_stop


def test_a_stop_between_accumulated_micro_batches_saves_after_the_optimizers_step(tmp_path: Path) -> None:
    """A checkpoint holds no gradients: saved at micro-batch 5 of steps of 3, it resumed without the two gradients
    summed so far, and the weights came out other than an uninterrupted run's."""
    whole, _ = _accumulating_run(tmp_path / "whole", 12)
    _, done = _accumulating_run(tmp_path / "stopped", 12, stop_after=4)
    assert done == 6  # held to the end of the accumulated step
    assert layout.list_committed(fsspec.filesystem("file"), str(tmp_path / "stopped"))[-1][0] == 6
    resumed, rest = _accumulating_run(tmp_path / "stopped", 12)
    assert rest == 6
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()))


def test_gradients_count_as_accumulating_from_backward_to_their_optimizers_step() -> None:
    model = torch.nn.Linear(2, 1)
    frozen = torch.nn.Linear(2, 1)  # not the state's optimizer's: its gradients do not count
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = spotrun.torch_state(model=model, optimizer=optimizer)
    assert not state.accumulating()
    frozen(torch.ones(2)).sum().backward()
    assert not state.accumulating()
    model(torch.ones(2)).sum().backward()
    assert state.accumulating()
    optimizer.step()
    assert not state.accumulating()
    model(torch.ones(2)).sum().backward()
    optimizer.zero_grad()  # a step the GradScaler skipped, then the next iteration's zero_grad
    assert not state.accumulating()
    assert not spotrun.torch_state(model=model).accumulating()  # no optimizer: nothing to tell


def _gan_run(root: Path, steps: int, stop_after: int | None = None) -> tuple[dict, int, bool]:
    """A GAN's loop: D steps on its loss, then G's loss back-propagates through D, leaving D gradients that D's next
    zero_grad discards unread. A save every 5 steps; a stop asked after step `stop_after`."""
    torch.manual_seed(0)
    generator, critic = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.05, momentum=0.9)
    opt_d = torch.optim.SGD(critic.parameters(), lr=0.05, momentum=0.9)
    state = spotrun.torch_state(G=generator, D=critic, optG=opt_g, optD=opt_d, rng=False)
    real, noise = torch.ones(4, 2), torch.linspace(-1, 1, 8).reshape(4, 2)
    flag, done = PreemptionFlag(), 0
    with spotrun.Checkpointer(root, every_steps=5, keep_last=None, signals=(), flag=flag) as ckpt:
        start = ckpt.restore(state) or 0
        for step in range(start, steps):
            opt_d.zero_grad()
            (critic(generator(noise).detach()).mean() - critic(real).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            (-critic(generator(noise)).mean()).backward()  # D now holds gradients it never steps with
            opt_g.step()
            done += 1
            if stepped_and_stopped(ckpt, state, flag, step, stop_after):
                break
        stopped = ckpt.should_stop
    weights = {**generator.state_dict(), **{f"D.{k}": v for k, v in critic.state_dict().items()}}
    return weights, done, stopped


def test_a_gan_loop_saves_and_stops_at_a_notice_and_resumes_exactly(tmp_path: Path) -> None:
    """D's gradients from G's backward looked like accumulation at every step: no checkpoint was ever saved, and a
    notice never stopped the run."""
    whole, _, _ = _gan_run(tmp_path / "whole", 20)
    assert [step for step, _ in layout.list_committed(fsspec.filesystem("file"), str(tmp_path / "whole"))]
    _, done, stopped = _gan_run(tmp_path / "stopped", 20, stop_after=7)
    assert stopped and done <= 9  # held at most a step
    resumed, _, _ = _gan_run(tmp_path / "stopped", 20)
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)


@pytest.mark.parametrize(("failures", "restored"), [(1, 2), (2, 1)])
def test_a_read_that_fails_in_the_io_is_tried_once_more_before_the_checkpoint_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int, restored: int,
) -> None:
    """Skipped, the newer checkpoint would be removed by the next save's pruning (a later timeline): one EIO lost
    the progress it held. A second failure skips it, as before."""
    from spotrun.sdk import checkpointer as checkpointer_module
    from spotrun.sdk import storage

    save_steps(tmp_path, [0, 1])
    monkeypatch.setattr(checkpointer_module, "READ_RETRY_PAUSE_SECONDS", 0.0)
    real_open, left = storage.LocalStore._open_for_reading, [failures]

    def flaky(self, file, size):  # type: ignore[no-untyped-def]
        if left[0] and layout.checkpoint_name(2) in file:
            left[0] -= 1
            raise OSError(5, "Input/output error")
        return real_open(self, file, size)

    monkeypatch.setattr(storage.LocalStore, "_open_for_reading", flaky)
    state, _, _ = make_state()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        assert spotrun.Checkpointer(tmp_path, signals=()).restore(state) == restored
    assert any("Input/output error" in str(w.message) for w in warned) == (restored == 1)


def storage_of(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


class TiedLinears(torch.nn.Module):
    """Two layers with one weight (as a language model's embedding and output layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4, bias=False)
        self.b = torch.nn.Linear(4, 4, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


def test_tensors_sharing_a_storage_are_written_once_and_restored_sharing_it(tmp_path: Path) -> None:
    """Each tensor was copied on its own: a tied weight was written twice, and a view and its base came back as two
    tensors where the restore does not copy into live ones (a dict's new key; torch.save keeps them one)."""
    base = torch.arange(8.0)
    model = TiedLinears()
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=model, values={"base": base, "view": base[2:5]}, rng=False), 0)
    shared = tmp_path / "ckpt-000000000001" / "shared.pt"
    with shared.open("rb") as fh:
        saved = tensorfile.read(fh, shared.stat().st_size, lambda chunk: None)()["model"]
    assert storage_of(saved["a.weight"]) == storage_of(saved["b.weight"])

    values: dict[str, object] = {}
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.restore(spotrun.torch_state(model=TiedLinears(), values=values, rng=False))
    values["base"][3] = 100.0  # type: ignore[index]
    assert values["view"].tolist() == [2.0, 100.0, 4.0]  # type: ignore[attr-defined]


def test_a_tied_model_resumes_exactly(tmp_path: Path) -> None:
    def train(model: TiedLinears, optimizer: torch.optim.Optimizer, steps: range) -> None:
        for step in steps:
            optimizer.zero_grad()
            model(torch.full((2, 4), float(step + 1))).sum().backward()
            optimizer.step()

    torch.manual_seed(0)
    uninterrupted = TiedLinears()
    resumed = TiedLinears()
    resumed.load_state_dict(uninterrupted.state_dict())
    train(uninterrupted, torch.optim.Adam(uninterrupted.parameters(), lr=0.1), range(4))
    optimizer = torch.optim.Adam(resumed.parameters(), lr=0.1)
    train(resumed, optimizer, range(2))
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(spotrun.torch_state(model=resumed, optimizer=optimizer, rng=False), 1)
    model = TiedLinears()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(model=model, optimizer=optimizer, rng=False)) == 2
    assert model.a.weight is model.b.weight and optimizer.param_groups[0]["params"] == [model.a.weight]
    train(model, optimizer, range(2, 4))
    assert torch.equal(model.a.weight, uninterrupted.a.weight)


def test_tensors_tied_at_one_save_and_not_at_the_next_are_saved_apart(tmp_path: Path) -> None:
    """The next save copies into the memory of the one before, where two tensors shared one copy: it is lent to one
    tensor only, and only to one that is all of it (the payload file writes a tensor's whole storage)."""
    size = 1 << 20  # large enough for page-aligned host copies (see ``snapshot``)
    tied, based = torch.zeros(size), torch.zeros(8)
    values: dict[str, object] = {"a": tied, "b": tied, "view": based[2:5], "base": based}
    state = spotrun.torch_state(values=values, rng=False)
    untied = {"a": torch.ones(size), "b": torch.full((size,), 2.0), "view": torch.full((3,), 3.0),
              "base": torch.ones(8)}
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        ckpt.save(state, 0)
        values.update(untied)
        ckpt.save(state, 1)
    restored: dict[str, torch.Tensor] = {}
    with spotrun.Checkpointer(tmp_path, signals=()) as ckpt:
        assert ckpt.restore(spotrun.torch_state(values=restored, rng=False)) == 2
    assert all(torch.equal(restored[key], tensor) for key, tensor in untied.items())
    assert restored["view"].untyped_storage().nbytes() == restored["view"].nbytes
