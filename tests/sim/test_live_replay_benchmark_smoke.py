"""The live replay runs the real controller on a trace beside the simulator, and both bill the same run alike."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "live_replay.py"
ROW = re.compile(
    r"^\| (\S+) \| ([\d.]+) \| ([\d.]+) / ([\d.]+) \| ([\d.-]+) / ([\d.-]+) \| (\d+) / (\d+) \| (\d+) / (\d+) \|$",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def live_replay() -> ModuleType:
    """The script, loaded once: each replay runs its `main` in this process, as the script runs one market after
    another. A process per replay paid ~1.7 s of CPU for the imports, about 40% of a replay."""
    spec = importlib.util.spec_from_file_location("live_replay_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_script(live_replay: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`python benchmarks/live_replay.py ARGS` in this process: its exit code, stdout and stderr."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))  # each run sets it: put it back after the test

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = live_replay.main(list(args))
            except SystemExit as exit:  # argparse refusing an argument
                code = exit.code
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture
def replay(tmp_path: Path, run_script):
    def run(name: str, data: list[int], *options: str) -> tuple[str, ...]:
        trace = tmp_path / f"{name}.json"
        trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
        code, out, err = run_script("--trace", str(trace), "--compute-hours", "2", "--deadline-hours", "3", *options)
        assert code == 0, err[-3000:]
        [row] = ROW.findall(out)
        return row

    return run


def test_with_spot_all_along_live_and_simulated_cost_the_spot_run(replay) -> None:
    # 2 h of compute and a 0.1 h restart on spot at 0.9731 / 3.06 of the on-demand price: ~0.334 of on-demand
    _, _, live, sim, live_hours, _, live_preempted, _, live_launches, _ = replay("always", [1] * 40)
    assert 0.32 < float(live) < 0.35 and 0.32 < float(sim) < 0.35 and abs(float(live) - float(sim)) < 0.02
    assert float(live_hours) < 2.3 and (live_preempted, live_launches) == ("0", "1")


def test_a_job_with_half_an_hour_of_slack_takes_the_spot_that_is_there(replay) -> None:
    # asked a minute after the plan's step began, the policy counted only the whole steps left: 9 of the 30 minutes
    # of slack were gone, it started on on-demand, moved to spot, and 4 minutes later back (1.116 of on-demand)
    _, _, live, sim, live_hours, _, _, _, live_launches, _ = replay(
        "always", [1] * 40, "--deadline-hours", "2.5"
    )
    assert live_launches == "1" and float(live) < 0.35 and abs(float(live) - float(sim)) < 0.02
    assert float(live_hours) <= 2.5


def test_without_progress_reports_the_try_a_job_runs_on_is_counted_once(replay) -> None:
    # uniform_progress read the job as done at half its estimate (its running try counted twice) and stopped it
    _, _, live, _, _, _, live_preempted, _, live_launches, _ = replay(
        "always", [1] * 40, "--progress", "none", "--policy", "uniform_progress"
    )
    assert (live_preempted, live_launches) == ("0", "1") and float(live) < 0.35


def test_a_job_preempted_live_still_meets_its_deadline_without_progress_reports(replay) -> None:
    data = [1] * 7 + [0] * 3 + [1] * 30
    _, _, live, _, live_hours, _, live_preempted, _, _, _ = replay("gappy", data, "--progress", "none")
    assert int(live_preempted) >= 1 and float(live_hours) <= 3.0
    assert 0.32 < float(live) < 1.2


def test_zones_together_move_a_job_to_the_zone_that_still_has_spot(tmp_path: Path, run_script) -> None:
    for zone, data in (("za", [1] * 6 + [0] * 34), ("zb", [1] * 40)):
        (tmp_path / f"{zone}_gpu.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    code, out, err = run_script("--trace", str(tmp_path / "za_gpu.json"), "--trace", str(tmp_path / "zb_gpu.json"),
                                "--zones-together", "--compute-hours", "2", "--deadline-hours", "3")
    assert code == 0, err[-3000:]
    [(market, _, live, _, live_hours, _, live_preempted, _, _, _)] = ROW.findall(out)
    # whichever zone it starts in, it ends on zb's spot: at most one preemption, never on-demand for long
    assert market == "gpu" and int(live_preempted) <= 1 and float(live) < 0.4 and float(live_hours) <= 3.0


def test_a_notice_lets_the_trainer_save_what_a_preemption_without_one_loses(replay) -> None:
    # spot goes at 70 min for half an hour; the trainer saves every 45 min (at 51 min): without notice the 19 min
    # since are lost, with 2 min of notice it saves them: greedy then meets the deadline on spot alone
    data = [1] * 7 + [0] * 3 + [1] * 30
    quiet = replay("gappy", data, "--save-every", "2700", "--policy", "greedy")
    told = replay("gappy", data, "--save-every", "2700", "--policy", "greedy", "--notice", "120")
    assert quiet[6] == told[6] == "1"  # one preemption each
    assert float(told[4]) < float(quiet[4])
    assert float(told[2]) < 0.4 < float(quiet[2])  # on-demand at the end only without notice


@pytest.mark.soak  # ~20 s: gangs' generations and preemptions are tested against the fake cloud in tests/control
def test_a_gang_runs_its_generations_through_a_preemption_and_meets_its_deadline(replay) -> None:
    # three nodes in the trace's zone: one launch each while spot holds, and each billed as the one-node job is
    _, _, live, sim, _, _, preempted, _, launches, _ = replay("always", [1] * 40, "--nodes", "3")
    assert (preempted, launches) == ("0", "3") and abs(float(live) - float(sim)) < 0.02
    # spot goes at 70 min for half an hour, with notice: the nodes save, the gang is placed again and finishes
    _, _, live, _, hours, _, preempted, _, launches, _ = replay(
        "gappy", [1] * 7 + [0] * 3 + [1] * 30, "--nodes", "3", "--notice", "120"
    )
    assert preempted == "3" and int(launches) >= 6 and float(hours) <= 3.0 and float(live) < 1.0


@pytest.mark.soak  # ~15 s: gangs' moves are tested against the fake cloud in tests/control/test_controller_gang_moves.py
def test_a_gang_moves_to_spot_that_returns_as_a_single_node_does(replay) -> None:
    # no spot for the first half hour: on-demand first, then spot. The gang's ranks trained from its restart overhead
    # after the generation began, two ticks after the launch, not after the launch as one node's trainer does: two
    # minutes less slack, and the gang stayed on on-demand (1.067 of on-demand against one node's 0.520)
    data = [0] * 3 + [1] * 37
    one = replay("late", data, "--deadline-hours", "2.5")
    gang = replay("late", data, "--deadline-hours", "2.5", "--nodes", "3")
    assert (one[8], gang[8]) == ("2", "6")  # each node: on-demand, then spot
    assert float(gang[2]) == float(one[2]) < 0.6 and gang[4] == one[4]


def test_the_story_tells_each_attempt_and_event_of_a_run(tmp_path: Path, run_script) -> None:
    trace = tmp_path / "gappy.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 7 + [0] * 3 + [1] * 30}))
    code, out, err = run_script("--trace", str(trace), "--compute-hours", "2", "--deadline-hours", "3", "--story")
    assert code == 0, err[-3000:]
    assert re.search(r"^job 1: SUCCEEDED, [1-9]\d* preemptions$", err, re.MULTILINE), err[-3000:]
    assert re.search(r"^  attempt 1 spot gappy: launched 1, up 1, ended 70 \(preempted\)", err, re.MULTILINE)
    assert re.search(r"^  \d+ min state: RUNNING → SUCCEEDED", err, re.MULTILINE)
    assert "attempt 1" not in out  # the table stays the only thing on stdout


def test_a_trainer_that_saves_on_a_cycle_of_gaps_meets_its_deadline(tmp_path: Path, run_script) -> None:
    # saves a minute apart three times, then goes 30 minutes without one, in turn (an evaluation, say): with 30
    # minutes of slack, a loss late in such a gap could not be made up, so once the gap has outlasted the short ones
    # the job leaves spot that is there all along (saving every tick, it holds it: one launch, ~0.33), and finishes
    trace = tmp_path / "always.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 40}))
    code, out, err = run_script("--trace", str(trace), "--compute-hours", "2", "--deadline-hours", "2.5",
                                "--save-every", "60,60,60,1800")
    assert code == 0, err[-3000:]
    assert "a checkpoint every 60,60,60,1800 s" in out
    [row] = ROW.findall(out)
    _, _, live, _, live_hours, _, _, _, live_launches, _ = row
    assert float(live_hours) <= 2.5 and int(live_launches) >= 2 and float(live) > 0.5


def test_a_gap_between_saves_that_is_not_positive_seconds_is_refused() -> None:
    # run as a script, the one test that does: the other tests run its `main` in this process
    done = subprocess.run([sys.executable, str(SCRIPT), "--save-every", "60,-5"], capture_output=True, text=True)
    assert done.returncode == 2 and "every gap between saves must be positive: '60,-5'" in done.stderr


def test_a_zone_priced_apart_is_quoted_billed_and_simulated_alike(tmp_path: Path, replay, run_script) -> None:
    # the cloud quotes the zone's spot at 0.8 (the controller's price function, no prices in the job file): ~0.28
    _, _, live, sim, _, _, live_preempted, _, live_launches, _ = replay(
        "always", [1] * 40, "--zone-spot-price", "always=0.8"
    )
    assert (live_preempted, live_launches) == ("0", "1")
    assert 0.26 < float(live) < 0.29 and 0.26 < float(sim) < 0.29 and abs(float(live) - float(sim)) < 0.02
    code, _, err = run_script("--trace", str(tmp_path / "always.json"), "--zone-spot-price", "mars=1")
    assert code == 2 and "no zone mars in these markets; zones: always" in err


@pytest.mark.soak  # ~15 s: EC2's free first hour is tested in tests/control/test_reclaim_billing.py
def test_billed_as_ec2_the_spot_it_takes_back_in_its_first_hour_is_free_unless_spotrun_terminates_it(
    replay,
) -> None:
    # spot for 50 min, gone for half an hour, back: the first instance, told 2 min ahead, is taken back in its first
    # hour; greedy runs the same attempts however it is billed
    data = [1] * 5 + [0] * 3 + [1] * 32
    runs = {
        name: replay("gappy", data, "--policy", "greedy", "--notice", "120", *options)
        for name, options in {
            "per second": (), "as EC2": ("--bill-as", "aws"),
            "as EC2, terminated by spotrun": ("--bill-as", "aws", "--terminate-on-notice"),
        }.items()
    }
    assert {row[6:] for row in runs.values()} == {("1", "1", "2", "2")}  # the same preemption and launches
    cost = {name: float(row[2]) for name, row in runs.items()}
    # the first instance's ~50 min of spot, at 0.9731 / 3.06 of on-demand over the 2 h job: ~0.13
    assert 0.11 < cost["per second"] - cost["as EC2"] < 0.15
    assert cost["as EC2, terminated by spotrun"] == cost["per second"]
