"""End to end on one machine, for each framework callback: a 🤗 Trainer job (examples/hf_trainer) and a Lightning
job (examples/lightning) through the real CLI, controller daemon, local cloud and agent, preempted with its notice
once it has a checkpoint; the next attempt restores the backed-up checkpoint and the job ends with the weights of
an uninterrupted run. Both are soak runs (`make soak`)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from harness import REPO, final_result

pytestmark = pytest.mark.xdist_group("e2e")  # with `make test`'s workers: one e2e test at a time

STEPS = 240


# Soak runs (~45 s each): the agent's side is the same for every payload (tests/e2e/test_e2e_local_spot.py), and
# tests/sdk/test_sdk_hf_trainer.py and test_sdk_lightning.py preempt and resume each framework itself
@pytest.mark.soak
@pytest.mark.parametrize("example, library", [("hf_trainer", "transformers"), ("lightning", "lightning")])
def test_a_preempted_framework_job_resumes_from_its_backed_up_checkpoint_exactly(spotrun, tmp_path, example, library):
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed")
    folder = REPO / "examples" / example
    reference_dir = tmp_path / "reference"
    subprocess.run(
        [sys.executable, "train.py"], cwd=folder, check=True, capture_output=True, timeout=240,
        env={**os.environ, "MAX_STEPS": str(STEPS), "SPOTRUN_CHECKPOINT_DIR": str(reference_dir)},
    )
    reference = json.loads((reference_dir / "final.json").read_text())
    name = f"{example.replace('_', '-')}-e2e"
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: {name}
workdir: {folder}
run: python train.py
env: {{MAX_STEPS: {STEPS}, SAVE_STEPS: 1000, SAVE_SECONDS: 2, STEP_SECONDS: 0.05}}  # saves by wall time only
resources: {{cloud: local, instance_type: local.cpu}}
spot: {{preemptions_before_fallback: 5}}
checkpoint: {{sync_interval: 1s}}
""")
    assert "launched job 1" in spotrun.run("launch", str(job)).stdout
    row = spotrun.wait_for(
        1, lambda r: r["state"] == "RUNNING" and (r["checkpoint_step"] or 0) > 0, timeout=120, what="a checkpoint"
    )
    spotrun.run("preempt", "1")
    spotrun.wait_for(1, lambda r: r["preemptions"] == 1, what="the preemption")
    done = spotrun.wait_for(1, lambda r: r["state"] in ("SUCCEEDED", "FAILED"), timeout=180, what="the end")
    assert done["state"] == "SUCCEEDED", spotrun.controller_log()
    assert done["attempts"] == 2
    final = final_result(spotrun.home, 1, name)
    assert final == {"sha256": reference["sha256"], "steps": STEPS}
    logs = spotrun.run("logs", "1").stdout
    resumed = [line for line in logs.splitlines() if line.startswith("starting from")]
    assert resumed[0] == "starting from scratch" and "ckpt-" in resumed[1], logs[-3000:]
    assert int(re.search(r"ckpt-(\d+)", resumed[1]).group(1)) >= row["checkpoint_step"]
