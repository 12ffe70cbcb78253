"""spotrun.LightningCheckpoints (sdk/lightning.py) with a real Lightning Trainer (examples/lightning/train.py): a run
preempted by SIGTERM mid-epoch saves at the end of the step, exits 75 (Lightning's own SIGTERM exception never
reaches the script) and resumes to the weights of an uninterrupted run, also under DDP with the notice on one rank;
its checkpoints are committed in spotrun's layout, every so many steps; a damaged one is skipped, none intact is an error that deletes
nothing; saves every so many steps, keep_last, and bad settings refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("lightning")

from spotrun.sdk import PREEMPTED_EXIT_CODE, CheckpointWarning, NoValidCheckpoint  # noqa: E402
from spotrun.sdk.layout import MANIFEST_NAME, checkpoint_name  # noqa: E402
from spotrun.sdk.lightning import CHECKPOINT_FILE, PAYLOAD, LightningCheckpoints  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning"
STEPS = 90  # digits: 57 batches of 32 an epoch, so the notice at step 40 lands mid-epoch (the first)
# the example's run, with a SIGTERM the trainer sends itself at the end of step NOTICE_AT_STEP, as the agent sends it
# at a notice; under torchrun only rank 1 gets it. DEVICES > 1: DDP over gloo, each rank its share of the data.
PREEMPTED_TRAINER = f"""
import os, signal, sys
sys.path.insert(0, {str(EXAMPLE)!r})
import lightning as L
import torch
import spotrun, train

class Notice(L.Callback):
    batches = 0

    def on_train_batch_end(self, trainer, *_):
        Notice.batches += 1
        at = trainer.global_step == int(os.environ.get("NOTICE_AT_STEP", "-1")) or (
            Notice.batches == int(os.environ.get("NOTICE_AT_BATCH", "-1")))
        if at and os.environ.get("RANK", "1") == "1":
            os.kill(os.getpid(), signal.SIGTERM)

world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
L.seed_everything(7 + (rank if os.environ.get("SEED_PER_RANK") else 0), verbose=False)
model = train.Net()  # DDP starts every rank from rank 0's weights
def masked(samples):  # a masking collator: each batch drops features drawn at random, from the global torch RNG
    features, labels = torch.utils.data.default_collate(samples)
    return features * torch.bernoulli(torch.full_like(features, 0.8)), labels

collate = dict(collate_fn=masked, num_workers=2) if os.environ.get("MASKED") else {{}}
loader = spotrun.ResumableLoader(train.digits(), batch_size=32, seed=7, world_size=world, rank=rank, **collate)
spot = spotrun.LightningCheckpoints(every_steps=int(os.environ.get("SAVE_STEPS", "1000")), every_seconds=None)
options = dict(strategy="ddp", devices=world, num_nodes=1) if world > 1 else dict(devices=1)
run = L.Trainer(max_steps={STEPS}, accelerator="cpu", logger=False, enable_checkpointing=False,
                accumulate_grad_batches=int(os.environ.get("ACCUMULATE", "1")),
                enable_progress_bar=False, enable_model_summary=False, callbacks=[Notice(), spot], **options)
start = spot.resume_from()
print(f"starting from {{start or 'scratch'}}", flush=True)
run.fit(model, loader, ckpt_path=start)
spot.exit_if_stopped()
print(f"weights sha256: {{spotrun.weights_sha256(model.state_dict())}} at {{run.global_step}}", flush=True)
if world > 1:  # gloo on CPU may abort a rank in the interpreter's exit after a run (the note in sdk/hf_trainer.py)
    os._exit(0)
"""


def run_trainer(tmp_path: Path, store: Path, *, ranks: int = 1, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "preempted.py"
    script.write_text(PREEMPTED_TRAINER)
    command = [sys.executable, str(script)]
    if ranks > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)]
    environment = {**os.environ, "SPOTRUN_CHECKPOINT_DIR": str(store), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=240)


def weights(result: subprocess.CompletedProcess) -> str:
    found = re.findall(r"weights sha256: (\w+) at (\d+)", result.stdout)
    assert found, result.stdout[-2000:] + result.stderr[-3000:]
    assert int(found[0][1]) == STEPS
    return found[0][0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One uninterrupted run in one process, saving every 30 steps, and its store: the reference of the preempted run
    (its saves leave the weights as they are) and the saves checked by test_saves_every_so_many_steps_..., which
    uses a copy of the store."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    return run_trainer(folder, folder / "store", SAVE_STEPS="30"), folder / "store"


SHARES_THE_UNINTERRUPTED_RUN = pytest.mark.xdist_group("sdk-lightning-uninterrupted")  # one worker runs it once


# Under DDP it is a soak run (`make soak`, ~55 s): ranks stopping together at one rank's notice is tested in
# test_sdk_distributed.py; the callback itself by the one-process run
@pytest.mark.parametrize("ranks, seeds", [
    pytest.param(1, {}, id="one process"),
    pytest.param(2, {}, id="ddp", marks=pytest.mark.soak),
    # each rank's dropout draws its own stream: every rank resumed rank 0's, and the weights differed
    pytest.param(2, {"SEED_PER_RANK": "1"}, id="ddp, a seed per rank", marks=pytest.mark.soak),
])
@SHARES_THE_UNINTERRUPTED_RUN
def test_a_notice_mid_epoch_saves_exits_75_and_the_resume_is_exact(tmp_path, request, ranks, seeds):
    if ranks == 1:
        reference = weights(request.getfixturevalue("uninterrupted")[0])
    else:
        reference = weights(run_trainer(tmp_path, tmp_path / "reference", ranks=ranks, **seeds))
    store = tmp_path / "store"
    preempted = run_trainer(tmp_path, store, ranks=ranks, NOTICE_AT_STEP="40", **seeds)
    if ranks == 1:
        assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stdout[-2000:] + preempted.stderr[-3000:]
    else:  # torchrun reports each rank's exit: both stopped at rank 1's notice
        assert preempted.stderr.count(f"exitcode  : {PREEMPTED_EXIT_CODE}") == 2, preempted.stderr[-3000:]
    assert "SIGTERMException" not in preempted.stderr
    assert [p.name for p in store.iterdir()] == [checkpoint_name(40)]
    manifest = json.loads((store / checkpoint_name(40) / MANIFEST_NAME).read_text())
    assert (manifest["payload"], manifest["total_steps"], list(manifest["files"])) == (PAYLOAD, STEPS, [CHECKPOINT_FILE])
    assert 0 < manifest["save_seconds"] < 60
    resumed = run_trainer(tmp_path, store, ranks=ranks, **seeds)
    assert f"starting from {store / checkpoint_name(40) / CHECKPOINT_FILE}" in resumed.stdout, resumed.stdout[-2000:]
    assert weights(resumed) == reference, "the resumed run's weights are not the uninterrupted run's"


# three runs with workers (~45 s): a soak run; the loader's side of it is test_sdk_resumable_loader.py's
# test_a_collator_that_draws_masks_resumes_with_the_same_masks
@pytest.mark.soak
def test_a_masking_collator_resumes_with_the_masks_of_an_uninterrupted_run(tmp_path):
    """Collated in the loader's workers, the masks were drawn from the workers' RNGs, which a resumed run starts
    afresh: the weights differed."""
    reference = weights(run_trainer(tmp_path, tmp_path / "reference", MASKED="1"))
    store = tmp_path / "store"
    preempted = run_trainer(tmp_path, store, NOTICE_AT_STEP="40", MASKED="1")
    assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stdout[-2000:] + preempted.stderr[-3000:]
    assert weights(run_trainer(tmp_path, store, MASKED="1")) == reference


def test_every_rank_resumes_its_own_random_streams_from_the_checkpoint_rank_0_writes(tmp_path, monkeypatch):
    """Two ranks seeded apart, played in turn in one process (torch.distributed's calls stood in for; the real
    gloo run is the DDP soak run above): each resumes its own draws from what rank 0 wrote, not rank 0's."""
    import torch

    spot = LightningCheckpoints(tmp_path / "store", signals=())
    states, expected = [], []
    for rank in (0, 1):
        torch.manual_seed(7 + rank)
        states.append(spot.state_dict()["rng"])
        expected.append(torch.rand(3))
    as_rank = {"rank": 0}
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: as_rank["rank"])
    monkeypatch.setattr(torch.distributed, "all_gather_object", lambda out, _: out.__setitem__(slice(None), states))
    written = spot.state_dict()  # rank 0's
    assert len(written["rng_of_ranks"]) == 2
    for rank in (0, 1):
        as_rank["rank"] = rank
        torch.manual_seed(99)
        spot.load_state_dict(written)
        assert torch.equal(torch.rand(3), expected[rank]), f"rank {rank}"


def test_a_checkpoint_of_another_number_of_ranks_resumes_rank_0s_streams_with_a_warning(tmp_path):
    import torch

    spot = LightningCheckpoints(tmp_path / "store", signals=())
    torch.manual_seed(1)
    rank_0 = spot.state_dict()["rng"]
    expected = torch.rand(3)
    torch.manual_seed(2)
    other = spot.state_dict()["rng"]
    with pytest.warns(CheckpointWarning, match="RNG states of 2 ranks, this run has 1"):
        spot.load_state_dict({"rng": rank_0, "rng_of_ranks": [rank_0, other]})
    assert torch.equal(torch.rand(3), expected)


def test_a_notice_seen_between_accumulated_micro_batches_is_saved_after_the_next_optimizer_step(tmp_path):
    """The callback's rule alone (the real Trainer's run below is a soak run): it saved as soon as the step had moved
    since its last save, in the middle of the next step's micro-batches."""
    from types import SimpleNamespace

    import torch

    from spotrun.sdk.preemption import PreemptionFlag

    flag = PreemptionFlag()
    spot = LightningCheckpoints(tmp_path / "store", every_steps=None, every_seconds=None, signals=(), flag=flag)
    saved: list[int] = []
    spot._save = lambda trainer, step: saved.append(step)  # type: ignore[method-assign]
    strategy = SimpleNamespace(root_device=torch.device("cpu"), reduce=lambda votes, reduce_op: votes)
    trainer = SimpleNamespace(global_step=0, strategy=strategy, should_stop=False, world_size=1)
    spot._seen_step = spot._saved_step = 0  # as on_train_start leaves them
    for batch, step in enumerate([0, 1, 1, 2, 2, 3]):  # two micro-batches a step: global_step after each batch
        trainer.global_step = step
        if batch == 4:  # seen after the first micro-batch of step 3
            flag.request()
        spot.on_train_batch_end(trainer, None, None, None, batch)
    assert saved == [3] and trainer.should_stop


@pytest.mark.soak  # ~30 s: the real Trainer's run of the rule tested just above
def test_a_notice_between_accumulated_micro_batches_saves_after_the_step_and_the_resume_is_exact(tmp_path):
    """Two micro-batches a step: the notice at the end of step 40, seen after the next batch (the first of step
    41), was saved at once, the gradients summed so far lost, and the resumed run's weights differed."""
    reference = weights(run_trainer(tmp_path, tmp_path / "reference", ACCUMULATE="2"))
    store = tmp_path / "store"
    preempted = run_trainer(tmp_path, store, ACCUMULATE="2", NOTICE_AT_BATCH="80")
    assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stdout[-2000:] + preempted.stderr[-3000:]
    assert [p.name for p in store.iterdir()] == [checkpoint_name(41)]  # at the end of the step it was in
    assert weights(run_trainer(tmp_path, store, ACCUMULATE="2")) == reference


@SHARES_THE_UNINTERRUPTED_RUN
def test_saves_every_so_many_steps_keep_the_last_a_damaged_one_is_skipped_none_intact_deletes_nothing(
        tmp_path, uninterrupted):
    finished, saved = uninterrupted
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert sorted(p.name for p in saved.iterdir()) == [checkpoint_name(60), checkpoint_name(90)]  # keep_last=2
    store = tmp_path / "store"
    shutil.copytree(saved, store)
    spot = LightningCheckpoints(store, signals=())
    newest = store / checkpoint_name(90) / CHECKPOINT_FILE
    assert spot.resume_from() == str(newest)
    newest.write_bytes(newest.read_bytes()[:-10] + b"0123456789")
    (store / ".staging-lightning-120").mkdir()  # a save killed before its commit
    with pytest.warns(CheckpointWarning, match="does not match"):
        assert spot.resume_from() == str(store / checkpoint_name(60) / CHECKPOINT_FILE)
    assert not (store / ".staging-lightning-120").exists()
    native = store / checkpoint_name(100)  # a spotrun.Checkpointer's checkpoint is not Lightning's
    native.mkdir()
    (native / MANIFEST_NAME).write_text(json.dumps({"format": 2, "step": 100, "files": {}}))
    with pytest.warns(CheckpointWarning, match="not a Lightning checkpoint"):
        spot.resume_from()
    (store / checkpoint_name(60) / CHECKPOINT_FILE).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)
        with pytest.raises(NoValidCheckpoint, match="nothing was loaded or deleted"):
            spot.resume_from()
    assert {p.name for p in store.iterdir()} == {checkpoint_name(60), checkpoint_name(90), checkpoint_name(100)}


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="every_steps must be at least 1"):
        LightningCheckpoints(tmp_path, every_steps=0, signals=())
    with pytest.raises(ValueError, match="every_seconds must be positive"):
        LightningCheckpoints(tmp_path, every_seconds=0, signals=())
    with pytest.raises(ValueError, match="keep_last must be at least 1"):
        LightningCheckpoints(tmp_path, keep_last=0, signals=())
    with pytest.raises(ValueError, match="Lightning resumes from a local folder"):
        LightningCheckpoints("memory://checkpoints", signals=())


def _trainer_about_to_validate(validates: list[bool]):
    """A stand-in Trainer whose epoch loop says, batch by batch, whether a validation runs next."""
    from types import SimpleNamespace

    import torch

    strategy = SimpleNamespace(root_device=torch.device("cpu"), reduce=lambda votes, reduce_op: votes)
    epoch_loop = SimpleNamespace(_should_check_val_fx=lambda fetcher: validates.pop(0), _skip_next_val=False)
    fit_loop = SimpleNamespace(epoch_loop=epoch_loop, _data_fetcher=object())
    return SimpleNamespace(global_step=0, strategy=strategy, should_stop=False, world_size=1, fit_loop=fit_loop,
                           sanity_checking=False)


def test_a_save_before_a_validation_waits_for_its_end_and_a_notices_is_made_again_after_it(tmp_path):
    """The rule the real Trainer runs of test_sdk_framework_evaluation_resume.py check (soak): saved before the
    validation, which Lightning's resume skips, the resumed run went on without the validation's draws."""
    from spotrun.sdk.preemption import PreemptionFlag

    flag = PreemptionFlag()
    spot = LightningCheckpoints(tmp_path / "store", every_steps=2, every_seconds=None, signals=(), flag=flag)
    saved: list[int] = []
    spot._save = lambda trainer, step: saved.append(step)  # type: ignore[method-assign]
    trainer = _trainer_about_to_validate([True, True])
    spot._seen_step = spot._saved_step = 0
    trainer.global_step = 2  # due (every 2 steps), a validation next
    spot.on_train_batch_end(trainer, None, None, None, 1)
    assert saved == []
    spot.on_validation_end(trainer, None)
    assert saved == [2]
    trainer.global_step = 3  # a notice, a validation next: saved now (it may outlast the notice) and after it
    flag.request()
    spot.on_train_batch_end(trainer, None, None, None, 2)
    assert saved == [2, 3] and trainer.should_stop
    spot.on_validation_end(trainer, None)
    assert saved == [2, 3, 3]


def test_a_notice_skips_the_validation_lightning_adds_before_an_early_stop_and_keeps_a_scheduled_one(tmp_path):
    """Lightning validates once more when should_stop ends a run early: at a notice, its checkpoint committed, that
    validation (which the uninterrupted run never makes at that step) spent the notice's grace before the exit. A
    validation the schedule runs there is kept: the save is made again after it."""
    from spotrun.sdk.preemption import PreemptionFlag

    flag = PreemptionFlag()
    spot = LightningCheckpoints(tmp_path / "store", every_steps=2, every_seconds=None, signals=(), flag=flag)
    saved: list[int] = []
    spot._save = lambda trainer, step: saved.append(step)  # type: ignore[method-assign]
    trainer = _trainer_about_to_validate([False, False])
    epoch_loop = trainer.fit_loop.epoch_loop
    spot._seen_step = spot._saved_step = 0
    trainer.global_step = 2  # a periodic save, no notice: the run goes on as Lightning has it
    spot.on_train_batch_end(trainer, None, None, None, 1)
    assert saved == [2] and not trainer.should_stop and not epoch_loop._skip_next_val
    trainer.global_step = 3
    flag.request()
    spot.on_train_batch_end(trainer, None, None, None, 2)
    assert saved == [2, 3] and trainer.should_stop and epoch_loop._skip_next_val

    scheduled = _trainer_about_to_validate([True])
    spot._seen_step = spot._saved_step = 3
    scheduled.global_step = 4
    spot.on_train_batch_end(scheduled, None, None, None, 3)
    assert saved == [2, 3, 4] and scheduled.should_stop and not scheduled.fit_loop.epoch_loop._skip_next_val


def test_every_steps_counts_lightnings_optimizer_steps_when_a_batch_takes_several(tmp_path):
    """Manual optimization with two optimizers: global_step (what max_steps counts and checkpoints are named by)
    goes 2, 4, 6, ... a batch, and `step % every_steps` stepped over an odd every_steps: saved every 10 steps for 5."""
    spot = LightningCheckpoints(tmp_path / "store", every_steps=5, every_seconds=None, signals=())
    saved: list[int] = []
    spot._save = lambda trainer, step: saved.append(step)  # type: ignore[method-assign]
    trainer = _trainer_about_to_validate([False] * 10)
    spot._seen_step = spot._saved_step = 0
    for batch in range(10):
        trainer.global_step = 2 * (batch + 1)
        spot.on_train_batch_end(trainer, None, None, None, batch)
    assert saved == [6, 10, 16, 20]  # at the first batch that reaches each multiple of 5


OPTIONS_TRAINER = Path(__file__).with_name("sdk_lightning_options_trainer.py")


@pytest.mark.soak  # ~20 s: two real runs of the rule tested just above
def test_two_optimizers_under_manual_optimization_save_every_so_many_steps_and_resume_exactly(tmp_path):
    def run(name: str) -> subprocess.CompletedProcess:
        environment = {**os.environ, "SPOTRUN_CHECKPOINT_DIR": str(tmp_path / name), "OMP_NUM_THREADS": "1",
                       "MANUAL": "1", "MAX_STEPS": "14", "SAVE_STEPS": "5"}
        return subprocess.run([sys.executable, str(OPTIONS_TRAINER)], env=environment, capture_output=True, text=True,
                              timeout=240)

    def final_weights(result: subprocess.CompletedProcess) -> str:
        found = re.findall(r"weights sha256: (\w+) at 14 ", result.stdout)
        assert found, result.stdout[-2000:] + result.stderr[-3000:]
        return found[0]

    reference = final_weights(run("store"))  # 7 batches of two optimizer steps each
    store = tmp_path / "store"
    assert sorted(p.name for p in store.iterdir()) == [checkpoint_name(6), checkpoint_name(10)]
    shutil.rmtree(store / checkpoint_name(10))  # as if preempted before step 10's save: resumed at step 6
    resumed = run("store")
    assert f"starting from {store / checkpoint_name(6) / CHECKPOINT_FILE}" in resumed.stdout, resumed.stdout[-2000:]
    assert final_weights(resumed) == reference


def test_a_second_writer_is_refused_at_its_first_save_until_the_first_ends_training(tmp_path, monkeypatch):
    """Two runs on one folder committed each other's half-written staging folders and pruned each other's
    checkpoints: the Checkpointer's one-writer lock (``writerlock``), taken before the first save writes anything
    into the folder, held to the end of training (or its exception)."""
    from types import SimpleNamespace

    from spotrun.sdk import CheckpointError, storage

    monkeypatch.setattr(storage, "CLAIM_WAIT_SECONDS", 0.0)  # refused at once, not after waiting for the holder

    def save_checkpoint(path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(b"weights")

    strategy = SimpleNamespace(barrier=lambda name=None: None, broadcast=lambda value, src=0: value)
    trainer = SimpleNamespace(save_checkpoint=save_checkpoint, strategy=strategy, is_global_zero=True, max_steps=10)
    store = tmp_path / "store"
    first, second, third = (LightningCheckpoints(store, signals=(), keep_last=1) for _ in range(3))
    first._save(trainer, 5)
    with pytest.raises(CheckpointError, match="another writer .* is saving checkpoints to this folder"):
        second._save(trainer, 3)
    assert sorted(p.name for p in store.iterdir()) == [checkpoint_name(5)]  # nor did it write into the folder
    first.on_train_end(trainer, None)
    second._save(trainer, 6)
    second.on_exception(trainer, None, RuntimeError("the run failed"))
    third._save(trainer, 7)
    assert sorted(p.name for p in store.iterdir()) == [checkpoint_name(7)]
