"""spotrun.TrainerCheckpoints (sdk/hf_trainer.py) with a real 🤗 Trainer (examples/hf_trainer/train.py): a run
preempted by SIGTERM saves at the end of the step, exits 75 and resumes to the weights of an uninterrupted run; its
checkpoints are committed in spotrun's layout (manifest last, checksums) and the Trainer's own folder is gone; a
damaged checkpoint is skipped, none intact is an error that deletes nothing; saves by wall time, keep_last, and
settings that would break an exact resume are refused."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from spotrun import weights_sha256  # noqa: E402
from spotrun.sdk import PREEMPTED_EXIT_CODE, CheckpointWarning, NoValidCheckpoint  # noqa: E402
from spotrun.sdk.foreign import commit  # noqa: E402
from spotrun.sdk.hf_trainer import PAYLOAD, TrainerCheckpoints  # noqa: E402
from spotrun.sdk.layout import MANIFEST_NAME, checkpoint_name  # noqa: E402
from spotrun.sdk.preemption import DEFAULT_SIGNALS, PreemptionFlag  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_trainer"
_spec = importlib.util.spec_from_file_location("hf_trainer_example", EXAMPLE / "train.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

STEPS = 60
# a SIGTERM sent to the trainer by itself at the end of step NOTICE_AT_STEP, as the agent sends it at a notice
# (under torchrun, to rank 1 only)
PREEMPTED_TRAINER = f"""
import os, signal, sys, time
sys.path.insert(0, {str(EXAMPLE)!r})
from transformers import TrainerCallback
import train

class Notice(TrainerCallback):
    def on_step_end(self, args, state, control, **_):
        if state.global_step == int(os.environ["NOTICE_AT_STEP"]) and os.environ.get("RANK", "1") == "1":
            os.kill(os.getpid(), signal.SIGTERM)  # under torchrun, only rank 1 gets the notice
        if control.should_save and os.environ.get("RANK") == "1":
            time.sleep(1)  # rank 1 writes its files into the checkpoint after rank 0 has written its own

run, spot = train.trainer([Notice()])
start = spot.resume_from()
print(f"starting from {{start or 'scratch'}}", flush=True)
run.train(resume_from_checkpoint=start)
spot.exit_if_stopped()
print(f"weights sha256: {{train.spotrun.weights_sha256(run.model.state_dict())}}", flush=True)
if "RANK" in os.environ:  # torchrun on CPU: a gloo rank may abort in the interpreter's exit after a run (the note
    os._exit(0)           # in sdk/hf_trainer.py); the exit code is not what these tests check
"""


def _environment(tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ, "SPOTRUN_CHECKPOINT_DIR": str(tmp_path / name / "checkpoints"),
        "OUTPUT_DIR": str(tmp_path / name / "hf-output"), "MAX_STEPS": str(STEPS), "SAVE_STEPS": "25", **extra,
    }


def _weights(output: str) -> str:
    """The final weights' hash the run printed (every rank of a torchrun prints the same one; their lines may be
    interleaved)."""
    [weights] = set(re.findall(r"weights sha256:\s*([0-9a-f]{64})", output))
    return weights


@pytest.fixture(autouse=True)
def cheaper_trainer_runs():
    """The Trainers run in this process on one thread, as in the subprocesses (OMP_NUM_THREADS=1): for these small
    tensors a second thread costs more CPU than it saves. The objects made before the test are kept out of the
    garbage collector's reach: accelerate calls gc.collect() at every train(), which walked all of them."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    gc.freeze()
    yield
    gc.unfreeze()
    torch.set_num_threads(threads)


def test_a_preempted_trainer_saves_exits_75_and_resumes_to_the_uninterrupted_weights(spot_run, tmp_path: Path) -> None:
    def run(code: str | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", code] if code else [sys.executable, str(EXAMPLE / "train.py")]
        # one thread, as this process runs the uninterrupted run below (cheaper_trainer_runs)
        environment = _environment(tmp_path, "b", OMP_NUM_THREADS="1", **extra)
        return subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=240)

    preempted = run(PREEMPTED_TRAINER, NOTICE_AT_STEP="37")
    assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stderr[-3000:]
    checkpoints = tmp_path / "b" / "checkpoints"
    # the Trainer's save at 25, and the one at the notice (the signal lands after this step's check: the next step)
    assert sorted(p.name for p in checkpoints.iterdir()) == [checkpoint_name(25), checkpoint_name(38)]
    manifest = json.loads((checkpoints / checkpoint_name(38) / MANIFEST_NAME).read_text())
    assert manifest["payload"] == PAYLOAD and manifest["step"] == 38 and manifest["total_steps"] == STEPS
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= set(
        manifest["files"])
    assert not list((tmp_path / "b" / "hf-output").glob("checkpoint-*"))  # moved into the store, not kept twice

    resumed = run()  # the example itself
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"starting from {checkpoints / checkpoint_name(38)}" in resumed.stdout
    # the uninterrupted run: the example's Trainer, here (a process of its own would import transformers again, ~8 s)
    uninterrupted, _ = spot_run(steps=STEPS, save_steps=25)
    uninterrupted.train()
    assert _weights(resumed.stdout) == weights_sha256(uninterrupted.model.state_dict()), "not the uninterrupted weights"


# A soak run (`make soak`, ~60 s): ranks stopping together at one rank's notice is tested in test_sdk_distributed.py,
# and the platform's torchrun launcher in tests/e2e/test_e2e_multinode.py
@pytest.mark.soak
def test_under_torchrun_every_rank_stops_at_one_ranks_notice_and_resumes_exactly(tmp_path: Path) -> None:
    """Two ranks (gloo, CPU): the notice reaches rank 1 only, both save the same step and exit 75, and each
    rank's own RNG state is in the committed checkpoint, so the resumed run ends with the uninterrupted weights."""
    def torchrun(name: str, **extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--no-python",
                sys.executable, "-c", PREEMPTED_TRAINER]
        return subprocess.run(argv, env=_environment(tmp_path, name, **extra), capture_output=True, text=True, timeout=240)

    uninterrupted = torchrun("a", NOTICE_AT_STEP="0")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    preempted = torchrun("b", NOTICE_AT_STEP="20")
    assert preempted.returncode != 0 and preempted.stderr.count("exitcode  : 75") == 2, preempted.stderr[-3000:]
    [committed] = (tmp_path / "b" / "checkpoints").iterdir()
    assert committed.name == checkpoint_name(21)
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in committed.iterdir()}
    resumed = torchrun("b", NOTICE_AT_STEP="0")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count(f"starting from {committed}") == 2
    assert _weights(resumed.stdout) == _weights(uninterrupted.stdout)


def test_final_json_is_written_by_the_worlds_main_process_alone_and_whole(spot_run, monkeypatch):
    """Under torchrun every rank ran the example's end, and all of them wrote the one final.json at once."""
    run, spot = spot_run(steps=2, save_steps=10)
    run.train()
    final = Path(spot.store.root) / "final.json"
    monkeypatch.setattr(run, "is_world_process_zero", lambda: False)  # any other rank
    weights = example.write_final(run, spot)
    assert not final.exists()
    monkeypatch.setattr(run, "is_world_process_zero", lambda: True)
    assert example.write_final(run, spot) == weights == weights_sha256(run.model.state_dict())
    assert json.loads(final.read_text()) == {"sha256": weights, "steps": 2}  # what the demos and e2e tests read
    assert [path.name for path in final.parent.glob("final*")] == ["final.json"]


@pytest.fixture
def spot_run(tmp_path, monkeypatch):
    """The example's Trainer in this process, saving into tmp_path, with a flag of its own (no signal handlers). The
    example's own callback installs handlers as it is made: they are put back, or a later test's signal finds them."""
    handlers = {signum: signal.getsignal(signum) for signum in DEFAULT_SIGNALS}
    monkeypatch.setenv("SPOTRUN_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path / "hf-output"))

    def make(steps: int = 20, save_steps: int = 10, **options):
        monkeypatch.setenv("MAX_STEPS", str(steps))
        monkeypatch.setenv("SAVE_STEPS", str(save_steps))
        run, _ = example.trainer()
        spot = TrainerCheckpoints(signals=(), **options)
        run.callback_handler.callbacks = [c for c in run.callback_handler.callbacks if not isinstance(c, TrainerCheckpoints)]
        run.add_callback(spot)
        return run, spot

    yield make
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_a_damaged_checkpoint_is_skipped_and_none_intact_deletes_nothing(spot_run, tmp_path):
    run, spot = spot_run(steps=30, save_steps=10)
    run.train()
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == [checkpoint_name(20), checkpoint_name(30)]  # keep_last=2
    assert spot.resume_from() == str(root / checkpoint_name(30))
    weights = root / checkpoint_name(30) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.warns(CheckpointWarning, match=f"{checkpoint_name(30)}: model.safetensors does not match"):
        assert spot.resume_from() == str(root / checkpoint_name(20))
    (root / checkpoint_name(20) / "optimizer.pt").unlink()
    with pytest.raises(NoValidCheckpoint, match="optimizer.pt is missing"):
        spot.resume_from()
    assert sorted(p.name for p in root.iterdir()) == [checkpoint_name(20), checkpoint_name(30)]


def test_a_checkpoint_skipped_as_damaged_does_not_take_the_place_of_an_intact_one(spot_run, tmp_path):
    """A damaged ckpt-25 (saves by wall time fall between the Trainer's) was counted as kept by keep_last=2: the save
    at 30 removed ckpt-20, the only intact one before it."""
    run, _ = spot_run(steps=20, save_steps=10)
    run.train()
    root = tmp_path / "checkpoints"
    shutil.copytree(root / checkpoint_name(20), root / checkpoint_name(25))
    weights = root / checkpoint_name(25) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    run, spot = spot_run(steps=30, save_steps=10)
    with pytest.warns(CheckpointWarning, match="does not match"):
        resumed = spot.resume_from()
    assert resumed == str(root / checkpoint_name(20))
    run.train(resume_from_checkpoint=resumed)
    assert sorted(p.name for p in root.iterdir()) == [checkpoint_name(20), checkpoint_name(30)]


def test_a_save_that_died_half_way_and_other_folders_are_not_resumed_from(spot_run, tmp_path):
    run, spot = spot_run(steps=10, save_steps=10)
    run.train()
    root = tmp_path / "checkpoints"
    (root / ".staging-ckpt-000000000020").mkdir()  # a commit killed before its rename
    (root / checkpoint_name(30)).mkdir()  # a folder without a manifest
    (tmp_path / "hf-output" / "checkpoint-40").mkdir(parents=True)  # the Trainer's write, never committed
    assert spot.resume_from() == str(root / checkpoint_name(10))
    assert not (root / ".staging-ckpt-000000000020").exists()
    # a spotrun.Checkpointer's checkpoint is not the Trainer's
    native = root / checkpoint_name(50)
    native.mkdir()
    (native / MANIFEST_NAME).write_text(json.dumps({"format": 2, "step": 50, "files": {}}))
    with pytest.warns(CheckpointWarning, match="not a Trainer checkpoint"):
        assert spot.resume_from() == str(root / checkpoint_name(10))


def test_saves_by_wall_time_and_at_a_preemption_flag(spot_run, tmp_path):
    flag = PreemptionFlag()
    run, spot = spot_run(steps=40, save_steps=1000, every_seconds=1e-9, keep_last=3, flag=flag)

    class Notice(TrainerCallback):
        def on_step_end(self, args, state, control, **_):
            if state.global_step == 7:
                flag.request()

    run.callback_handler.callbacks.insert(0, Notice())
    run.train()
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == [checkpoint_name(5), checkpoint_name(6), checkpoint_name(7)]
    assert run.state.global_step == 7 and spot.should_stop
    with pytest.raises(SystemExit) as exited:
        spot.exit_if_stopped()
    assert exited.value.code == PREEMPTED_EXIT_CODE


def test_what_would_break_an_exact_resume_is_refused(spot_run, tmp_path):
    run, _ = spot_run(steps=5)
    run.args.save_only_model = True
    with pytest.raises(ValueError, match="save_only_model"):
        run.train()
    run.args.save_only_model, run.args.save_strategy = False, "best"
    with pytest.raises(ValueError, match='save_strategy="best"'):
        run.train()
    with pytest.raises(ValueError, match="local path"):
        TrainerCheckpoints("memory://checkpoints", signals=())
    with pytest.raises(ValueError, match="every_seconds"):
        TrainerCheckpoints(tmp_path, every_seconds=0, signals=())
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        commit(TrainerCheckpoints(tmp_path, signals=()).store, str(tmp_path / "nowhere"), 3, payload=PAYLOAD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TrainerCheckpoints(tmp_path / "empty", signals=()).resume_from() is None


def test_a_manifest_that_lists_a_file_outside_its_folder_is_not_resumed_from(spot_run, tmp_path):
    run, spot = spot_run(steps=10, save_steps=10)
    run.train()
    root = tmp_path / "checkpoints"
    manifest_path = root / checkpoint_name(10) / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    (tmp_path / "secret").write_bytes(b"x")
    manifest["files"]["../../secret"] = {"size": 1, "xxh3_128": "0" * 32}
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(NoValidCheckpoint, match=r"\.\./\.\./secret is outside the checkpoint"):
        spot.resume_from()


def _epoch_rules(tmp_path: Path):
    from types import SimpleNamespace

    from transformers import TrainerControl

    flag = PreemptionFlag()
    spot = TrainerCheckpoints(tmp_path / "store", every_seconds=None, signals=(), flag=flag)
    return spot, flag, SimpleNamespace(global_step=12, epoch=1.0), TrainerControl()


def test_a_notice_at_an_epochs_last_step_saves_now_and_again_after_the_epochs_evaluation(tmp_path):
    """The rule the Trainer runs of test_sdk_framework_evaluation_resume.py check (soak): saved only before the
    epoch's evaluation, the resume (into the next epoch) went on without the draws that evaluation made."""
    spot, flag, state, control = _epoch_rules(tmp_path)
    flag.request()
    spot.on_step_end(None, state, control)
    assert control.should_save and control.should_training_stop  # now: the evaluation may outlast the notice
    control.should_save = False
    spot.on_epoch_end(None, state, control)
    assert control.should_save  # again, after the evaluation


def test_a_periodic_save_due_at_an_epochs_last_step_waits_for_the_epochs_end(tmp_path):
    spot, _, state, control = _epoch_rules(tmp_path)
    spot.every_seconds, spot._last_save = 1.0, 0.0
    spot.on_step_end(None, state, control)
    assert not control.should_save
    spot.on_epoch_end(None, state, control)
    assert control.should_save


def test_after_a_stop_mid_epoch_the_epochs_end_neither_evaluates_nor_saves_again(tmp_path):
    """save_strategy="epoch": the stop's checkpoint was saved over at the epoch's end, after an evaluation the
    uninterrupted run never made at that step."""
    spot, _, state, control = _epoch_rules(tmp_path)
    state.epoch = 0.5
    spot.should_stop = True  # the stop's checkpoint is committed (on_save)
    control.should_save = control.should_evaluate = True  # as DefaultFlowCallback sets them at the epoch's end
    spot.on_epoch_end(None, state, control)
    assert not control.should_save and not control.should_evaluate


WORDS = ["[PAD]", "[UNK]", "[MASK]"] + [f"w{i}" for i in range(20)]


def _tokenizer():
    """A tokenizer of 23 words, [MASK] among them."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocabulary = models.WordLevel({word: i for i, word in enumerate(WORDS)}, unk_token="[UNK]")
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(vocabulary), pad_token="[PAD]", unk_token="[UNK]",
                                   mask_token="[MASK]")


def _masking_trainer(tmp_path: Path, store: Path, *, mlm: bool = True, seed: int | None = None, workers: int = 0,
                     persistent_workers: bool = False):
    """A Trainer of a toy masked language model on 40 sequences (10 batches an epoch), its batches made by
    DataCollatorForLanguageModeling, which draws each batch's masks (mlm=True) from the global RNGs, or from a
    generator of its own (``seed``), in ``workers`` DataLoader processes (none: in the main one)."""
    import torch
    from torch import nn
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tokenizer = _tokenizer()
    words = WORDS

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.out = nn.Embedding(len(words), 8), nn.Linear(8, len(words))

        def forward(self, input_ids, labels=None, **_):
            logits = self.out(self.embed(input_ids))
            return {"loss": nn.functional.cross_entropy(logits.view(-1, len(words)), labels.view(-1)), "logits": logits}

    generator = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(3, len(words), (6,), generator=generator).tolist()} for _ in range(40)]
    args = TrainingArguments(output_dir=str(tmp_path / "hf-output"), max_steps=12, per_device_train_batch_size=4,
                             save_strategy="steps", save_steps=5, seed=7, report_to=[], use_cpu=True,
                             disable_tqdm=True, logging_strategy="no", remove_unused_columns=False,
                             dataloader_num_workers=workers, dataloader_persistent_workers=persistent_workers)
    torch.manual_seed(7)
    spot = TrainerCheckpoints(store, every_seconds=None, keep_last=None, signals=())
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=mlm, seed=seed)
    return Trainer(Net(), args, train_dataset=data, data_collator=collator, callbacks=[spot]), spot


def _trained(tmp_path: Path, name: str, **options: Any) -> str:
    """The weights of an uninterrupted run of ``_masking_trainer(**options)`` (its store keeps every checkpoint: 5,
    10 and the last)."""
    run, _ = _masking_trainer(tmp_path / name, tmp_path / name / "store", **options)
    run.train()
    return weights_sha256(run.model.state_dict())


def _resumed(tmp_path: Path, name: str, step: int, **options: Any) -> str:
    """The weights of a run resumed from that run's checkpoint of this step, copied into a store of its own."""
    store = tmp_path / f"{name}-from-{step}" / "store"
    shutil.copytree(tmp_path / name / "store" / checkpoint_name(step), store / checkpoint_name(step))
    run, spot = _masking_trainer(store.parent, store, **options)
    run.train(resume_from_checkpoint=spot.resume_from())
    return weights_sha256(run.model.state_dict())


def test_a_mid_epoch_resume_with_a_masking_collator_warns_that_it_is_inexact(tmp_path):
    """The Trainer restores the RNG states only after fetching the first batches of the epoch it resumes in, so the
    masks a collator draws from there differ: the resumed run ended with other weights, and nothing said so."""
    masked = _trained(tmp_path, "masked", mlm=True)
    with pytest.warns(CheckpointWarning, match=r"resuming mid-epoch \(step 5\) with DataCollatorForLanguageModeling"):
        assert _resumed(tmp_path, "masked", 5, mlm=True) != masked  # the warning's claim: transformers' limitation
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        assert _resumed(tmp_path, "masked", 10, mlm=True) == masked  # at an epoch's start: exact, and no warning
        assert _trained(tmp_path, "plain", mlm=False) == _resumed(tmp_path, "plain", 5, mlm=False)  # draws nothing


def test_a_masking_collator_in_persistent_workers_warns_at_the_start_that_no_resume_is_exact(tmp_path):
    """With dataloader_persistent_workers the collator masks in worker processes that live from one epoch to the
    next: their random state (a seeded collator's own generator, one copy per worker, or the RNGs they were seeded
    with) carries on there, out of the checkpoint's reach, and a resume starts them afresh. Even a resume at an
    epoch's start ended with other weights, and nothing said so; workers started at each epoch resume exactly."""
    persistent = {"seed": 3, "workers": 1, "persistent_workers": True}
    uninterrupted_warning = r"dataloader_persistent_workers=True .* DataCollatorForLanguageModeling draws .* workers"
    with pytest.warns(CheckpointWarning, match=uninterrupted_warning) as seen:
        masked = _trained(tmp_path, "persistent", **persistent)
    assert len([warning for warning in seen if warning.category is CheckpointWarning]) == 1  # once a run
    with pytest.warns(CheckpointWarning, match=uninterrupted_warning):
        assert _resumed(tmp_path, "persistent", 10, **persistent) != masked  # the warning's claim
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        restarted = {"seed": 3, "workers": 1, "persistent_workers": False}
        assert _trained(tmp_path, "restarted", **restarted) == _resumed(tmp_path, "restarted", 10, **restarted)


def test_a_seeded_masking_collators_generator_is_kept_with_the_checkpoint_and_put_back_at_the_resume(tmp_path):
    """DataCollatorForLanguageModeling(seed=...) masks with a torch.Generator of its own, which no checkpoint held:
    resumed, even at an epoch's start, it masked afresh from its seed, and the run ended with other weights. The
    callback's events are called here as the Trainer calls them, around the collator alone."""
    from types import SimpleNamespace

    import torch
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForLanguageModeling, TrainerControl

    examples = [{"input_ids": [3 + (i * 7 + j) % 20 for j in range(12)]} for i in range(4)]
    args = SimpleNamespace(output_dir=str(tmp_path / "hf-output"), save_only_model=False, save_strategy="steps",
                           load_best_model_at_end=False, ignore_data_skip=False)
    at_epoch_end = SimpleNamespace(global_step=5, max_steps=10, epoch=1.0, best_model_checkpoint=None,
                                   is_world_process_zero=True)

    def begin(spot: TrainerCheckpoints, collator: DataCollatorForLanguageModeling) -> None:
        loader = DataLoader(examples, batch_size=4, collate_fn=collator)
        spot.on_train_begin(args, at_epoch_end, TrainerControl(), train_dataloader=loader)

    collator = DataCollatorForLanguageModeling(_tokenizer(), mlm=True, seed=3)
    writer = TrainerCheckpoints(tmp_path / "store", every_seconds=None, signals=())
    begin(writer, collator)
    for _ in range(5):
        collator(examples)  # the epoch's batches
    written = tmp_path / "hf-output" / "checkpoint-5"
    written.mkdir(parents=True)
    torch.save({}, written / "rng_state.pth")  # the Trainer's own files, in short
    writer.on_save(args, at_epoch_end, TrainerControl())
    writer.on_train_end(args, at_epoch_end, TrainerControl())
    uninterrupted = collator(examples)

    fresh = DataCollatorForLanguageModeling(_tokenizer(), mlm=True, seed=3)
    resumed = TrainerCheckpoints(tmp_path / "store", every_seconds=None, signals=())
    assert resumed.resume_from() is not None
    begin(resumed, fresh)
    batch = fresh(examples)
    assert torch.equal(batch["input_ids"], uninterrupted["input_ids"])
    assert torch.equal(batch["labels"], uninterrupted["labels"])


def test_a_mid_epoch_resume_with_a_seeded_masking_collator_still_warns_and_says_why():
    """Its generator is put back, but as it was after the DataLoader's fetch of the batch after the checkpoint's."""
    from types import SimpleNamespace

    from transformers import DataCollatorForLanguageModeling

    from spotrun.sdk.hf_trainer import _warn_of_random_batches

    collator = DataCollatorForLanguageModeling(_tokenizer(), mlm=True, seed=3)
    with pytest.warns(CheckpointWarning, match=r"\(step 5\) .*its own generator \(seed=\) was saved after the Data"):
        _warn_of_random_batches(SimpleNamespace(collate_fn=collator), 5)


def test_a_replacement_cut_short_between_its_two_renames_is_resumed_from(tmp_path, monkeypatch, kill_between_renames):
    """Where the filesystem cannot swap two folders at once, a checkpoint saved again over one of the same step goes
    to the trash, then the new one is renamed into place; a kill in between leaves it complete in staging. It was put
    in place only after the resume had chosen: the run started over, and its first save pruned it as a later one."""
    spot = TrainerCheckpoints(tmp_path / "store", signals=())
    written = tmp_path / "written"
    for contents in (b"old", b"new"):
        written.mkdir()
        (written / "model.safetensors").write_bytes(contents)
        if contents == b"new":  # the second commit is killed between its two renames
            kill_between_renames()
            with pytest.raises(OSError, match="killed"):
                commit(spot.store, str(written), 8, payload=PAYLOAD)
            monkeypatch.undo()
        else:
            commit(spot.store, str(written), 8, payload=PAYLOAD)
    spot.store.release()  # the killed writer's lock on the folder went with it
    resumed = TrainerCheckpoints(tmp_path / "store", signals=()).resume_from()
    assert resumed is not None and resumed.endswith(checkpoint_name(8))
    assert Path(resumed, "model.safetensors").read_bytes() == b"new"


def test_a_second_writer_is_refused_at_its_first_save_until_the_first_ends_training(tmp_path, monkeypatch):
    """Two runs on one folder committed each other's half-written staging folders and pruned each other's
    checkpoints: the Checkpointer's one-writer lock (``writerlock``), taken at the first save, held to train end."""
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from spotrun.sdk import CheckpointError, storage

    monkeypatch.setattr(storage, "CLAIM_WAIT_SECONDS", 0.0)  # refused at once, not after waiting for the holder
    store = tmp_path / "store"

    def save(spot: TrainerCheckpoints, steps: int) -> None:
        output = tmp_path / f"output-{id(spot)}"
        (output / f"checkpoint-{steps}").mkdir(parents=True)
        (output / f"checkpoint-{steps}" / "rng_state.pth").write_bytes(b"rng")
        args = SimpleNamespace(output_dir=str(output), load_best_model_at_end=False)
        spot.on_save(args, TrainerState(global_step=steps, max_steps=10), TrainerControl())

    first, second = TrainerCheckpoints(store, signals=()), TrainerCheckpoints(store, signals=(), keep_last=1)
    save(first, 5)
    with pytest.raises(CheckpointError, match="another writer .* is saving checkpoints to this folder"):
        save(second, 3)  # would also have pruned the first one's newer checkpoint
    assert sorted(p.name for p in store.iterdir()) == [checkpoint_name(5)]
    first.on_train_end(None, None, None)
    save(second, 6)
    assert sorted(p.name for p in store.iterdir()) == [checkpoint_name(6)]
