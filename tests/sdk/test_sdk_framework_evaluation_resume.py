"""A notice next to an evaluation: the resumed run ends with the weights of the uninterrupted one.

Lightning: a save asked at a batch after which a validation runs (val_check_interval, an epoch's end) was made before
it; Lightning's resume skips that validation, whose draws from the global RNG (a shuffled val loader here) the
uninterrupted run had made. 🤗 Trainer: a notice at an epoch's last step saved before the epoch's evaluation
(eval_strategy="epoch"), which the resume (into the next epoch) skips; a notice mid-epoch with save_strategy="epoch"
saved again at the epoch's end, after an evaluation the uninterrupted run never made at that step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.sdk import PREEMPTED_EXIT_CODE

HERE = Path(__file__).resolve().parent


def _run(script: str, tmp_path: Path, name: str, ranks: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
    """The script in one process, or under torchrun in `ranks` (gloo, CPU)."""
    environment = {**os.environ, "SPOTRUN_CHECKPOINT_DIR": str(tmp_path / name / "store"),
                   "OUTPUT_DIR": str(tmp_path / name / "output"), "OMP_NUM_THREADS": "1", **env}
    command = [sys.executable, str(HERE / script)]
    if ranks > 1:
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=240)


def _weights(result: subprocess.CompletedProcess[str]) -> str:
    found = re.findall(r"weights sha256: (\w+)", result.stdout)
    assert found, result.stdout[-2000:] + result.stderr[-3000:]
    return found[0]


def _compare(script: str, tmp_path: Path, options: dict[str, str], notice: dict[str, str], ranks: int = 1) -> str:
    """The preempted run's output, once its resume has ended with the uninterrupted run's weights."""
    reference = _weights(_run(script, tmp_path, "a", ranks, **options))
    preempted = _run(script, tmp_path, "b", ranks, **options, **notice)
    if ranks == 1:
        assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stdout[-2000:] + preempted.stderr[-3000:]
    else:  # torchrun reports each rank's exit: every one stopped at rank 1's notice
        assert preempted.stderr.count(f"exitcode  : {PREEMPTED_EXIT_CODE}") == ranks, preempted.stderr[-3000:]
    resumed = _run(script, tmp_path, "b", ranks, **options)
    assert "starting from scratch" not in resumed.stdout
    assert _weights(resumed) == reference
    return preempted.stdout


# Each case runs a framework's Trainer three times (10-20 s): soak runs (`make soak`); the callbacks' rules are
# tested with stand-ins in test_sdk_hf_trainer.py and test_sdk_lightning.py
pytestmark = pytest.mark.soak


@pytest.mark.parametrize("options, notice", [
    pytest.param({"VCI": "5"}, {"NOTICE_AT_BATCH": "10"}, id="before a val_check_interval validation"),
    pytest.param({}, {"NOTICE_AT_BATCH": "13"}, id="at an epoch's last batch"),
])
def test_lightning_a_save_next_to_a_validation_resumes_exactly(tmp_path, options, notice):
    pytest.importorskip("lightning")
    _compare("sdk_lightning_options_trainer.py", tmp_path,
             {"MAX_EPOCHS": "2", "VAL": "1", "VAL_SHUFFLE": "1", **options}, notice)


def test_lightning_a_notice_mid_epoch_stops_without_the_validation_of_an_early_stop(tmp_path):
    """Lightning validated once more before stopping (its "validate when stopping early"), after the notice's
    checkpoint was committed: a validation the uninterrupted run does not make there, spending the notice's grace."""
    pytest.importorskip("lightning")
    preempted = _compare("sdk_lightning_options_trainer.py", tmp_path,
                         {"MAX_EPOCHS": "2", "VAL": "1", "VAL_SHUFFLE": "1", "DEBUG": "1"}, {"NOTICE_AT_BATCH": "5"})
    assert "batch 4 4" in preempted and "val start" not in preempted, preempted[-2000:]


@pytest.mark.parametrize("options, notice", [
    pytest.param({}, {"NOTICE_AT_STEP": "12"}, id="at an epoch's last step"),
    pytest.param({"SAVE": "epoch"}, {"NOTICE_AT_STEP": "5"}, id="mid-epoch, save_strategy=epoch"),
])
def test_trainer_a_save_next_to_an_epoch_evaluation_resumes_exactly(tmp_path, options, notice):
    pytest.importorskip("transformers")
    _compare("sdk_hf_options_trainer.py", tmp_path, {"EPOCHS": "2", "EVAL": "epoch", **options}, notice)


# Under DDP (two gloo ranks, the notice on rank 1 only; ~60-90 s a case): every rank saves, validates or not and
# stops at the same step, each resuming its own random streams. Rank 0 has 7 batches of 32 an epoch; the noisy
# validation data draws from the global RNG in every rank
@pytest.mark.parametrize("notice, validates", [
    pytest.param(5, True, id="before a val_check_interval validation"),
    pytest.param(10, False, id="mid-epoch, none next"),
])
def test_lightning_under_ddp_a_notice_next_to_a_validation_resumes_exactly(tmp_path, notice, validates):
    pytest.importorskip("lightning")
    preempted = _compare("sdk_lightning_options_trainer.py", tmp_path,
                         {"MAX_EPOCHS": "2", "VAL": "1", "NOISE": "1", "VCI": "5", "DEBUG": "1"},
                         {"NOTICE_AT_BATCH": str(notice)}, ranks=2)
    assert preempted.count(f"val start {notice} ") == (2 if validates else 0), preempted[-3000:]


@pytest.mark.parametrize("options, notice", [
    pytest.param({}, {"NOTICE_AT_STEP": "6"}, id="at an epoch's last step"),  # seen after the next step: 7
    pytest.param({"SAVE": "epoch"}, {"NOTICE_AT_STEP": "3"}, id="mid-epoch, save_strategy=epoch"),
])
def test_trainer_under_torchrun_a_save_next_to_an_epoch_evaluation_resumes_exactly(tmp_path, options, notice):
    """Two ranks of 100 samples, 7 steps of 16 an epoch; the notice at the end of a step is acted on at the end of
    the next (the callback votes before the Notice callback signals, as in the one-process cases)."""
    pytest.importorskip("transformers")
    _compare("sdk_hf_options_trainer.py", tmp_path, {"EPOCHS": "2", "EVAL": "epoch", **options}, notice, ranks=2)


def test_trainer_load_best_model_at_end_resumed_on_another_machine_loads_the_best_checkpoint(tmp_path):
    """The best checkpoint (the first: the "best" loss is the highest here) was named by its path in the attempt's
    output_dir, gone on the next machine: the Trainer forgot it and ended with the last weights; keep_last had
    pruned it from the store too."""
    pytest.importorskip("transformers")
    import shutil

    options = {"EPOCHS": "3", "EVAL": "steps", "EVAL_STEPS": "5", "SAVE": "steps", "SAVE_STEPS": "5", "BEST": "1",
               "GREATER": "1"}
    reference = _weights(_run("sdk_hf_options_trainer.py", tmp_path, "a", **options))
    preempted = _run("sdk_hf_options_trainer.py", tmp_path, "b", **options, NOTICE_AT_STEP="22")
    assert preempted.returncode == PREEMPTED_EXIT_CODE, preempted.stderr[-3000:]
    shutil.rmtree(tmp_path / "b" / "output")  # a new machine: only the store is restored
    resumed = _run("sdk_hf_options_trainer.py", tmp_path, "b", **options)
    assert _weights(resumed) == reference
