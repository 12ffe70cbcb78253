"""`spotrun simulate` end to end on small traces, and the demo's replay helper on the new policy code."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spotrun.cli.main import app  # `spotrun simulate` as users call it
from spotrun.policy import DefaultPolicy
from spotrun.sim.replay import ReplayJob, replay


def write_trace(path, data, gap=600):
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))


def test_simulate_json_compares_every_policy(tmp_path):
    rng = np.random.default_rng(0)
    for zone in ("a", "b"):
        write_trace(tmp_path / f"{zone}.json", (rng.random(300) < 0.7).astype(int).tolist())
    result = CliRunner().invoke(app, ["simulate", 
        "--trace", str(tmp_path), "--policy", "all", "--compute-hours", "8", "--deadline-hours", "12",
        "--every-hours", "12", "--json", "--processes", "1",
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    by_name = {p["policy"]: p for p in report["policies"]}
    assert set(by_name) == {"on_demand", "greedy", "uniform_progress", "default", "omniscient"}
    assert all(p["misses"] == 0 for p in by_name.values())
    assert by_name["omniscient"]["mean"] <= min(p["mean"] for p in by_name.values()) + 1e-9
    assert by_name["on_demand"]["mean"] > 1.0  # restart overhead and whole-step billing
    assert by_name["on_demand"]["worst"] == by_name["on_demand"]["mean"]
    assert by_name["on_demand"]["dearer_than_on_demand"] == 0.0 and by_name["omniscient"]["dearer_than_on_demand"] == 0.0
    assert all(p["worst"] >= p["p90"] for p in by_name.values())
    up, best, ours = (by_name[name]["mean"] for name in ("uniform_progress", "omniscient", "default"))
    assert (by_name["uniform_progress"]["gap_closed"], by_name["omniscient"]["gap_closed"]) == (0.0, 1.0)
    assert by_name["default"]["gap_closed"] == pytest.approx((up - ours) / (up - best), abs=1e-4)


def test_simulate_multi_zone_table(tmp_path):
    write_trace(tmp_path / "a.json", [1] * 200)
    write_trace(tmp_path / "b.json", [0, 1] * 100)
    result = CliRunner().invoke(app, ["simulate", 
        "--trace", str(tmp_path / "a.json"), "--trace", str(tmp_path / "b.json"), "--multi-zone",
        "--policy", "default", "--policy", "uniform_progress", "--compute-hours", "4", "--deadline-hours", "8",
        "--processes", "1", "--no-bound",
    ], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "1 market(s)" in result.output
    assert "default" in result.output and "uniform_progress" in result.output
    assert "omniscient" not in result.output and "gap closed" not in result.output  # no bound: no gap to measure


def test_by_market_reports_each_market_on_its_own(tmp_path):
    """Traces always up, never up and in between: the whole report averages them, --by-market shows each (spot all
    the way in one, on-demand all the way in another) with its own gap closed, where there is a gap."""
    write_trace(tmp_path / "up.json", [1] * 200)
    write_trace(tmp_path / "down.json", [0] * 200)
    write_trace(tmp_path / "mixed.json", (np.random.default_rng(4).random(200) < 0.5).astype(int).tolist())
    common = ["simulate", "--trace", str(tmp_path), "--compute-hours", "4", "--deadline-hours", "8", "--processes", "1",
              "--policy", "greedy", "--policy", "uniform_progress"]
    report = json.loads(CliRunner().invoke(app, [*common, "--json", "--by-market"]).output)
    assert "by_market" not in json.loads(CliRunner().invoke(app, [*common, "--json"]).output)
    by_market = {m["market"]: {p["policy"]: p for p in m["policies"]} for m in report["by_market"]}
    assert set(by_market) == {"up", "down", "mixed"}
    assert by_market["up"]["greedy"]["mean"] < 0.35 < 1 < by_market["down"]["greedy"]["mean"]
    overall = {p["policy"]: p for p in report["policies"]}
    for policy in ("greedy", "uniform_progress", "omniscient"):
        runs = [by_market[m][policy]["runs"] for m in by_market]
        assert sum(runs) == overall[policy]["runs"]
        means = [by_market[m][policy]["mean"] for m in by_market]
        assert overall[policy]["mean"] == pytest.approx(sum(r * m for r, m in zip(runs, means)) / sum(runs))
    mixed = by_market["mixed"]
    assert mixed["omniscient"]["mean"] < mixed["uniform_progress"]["mean"] and mixed["omniscient"]["gap_closed"] == 1.0
    assert by_market["down"]["greedy"]["gap_closed"] is None  # on-demand all the way for every policy: no gap
    table = CliRunner().invoke(app, [*common, "--by-market"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "by market" in table.output and all(f"│ {m} " in table.output for m in by_market)


def test_every_report_shows_the_omniscient_bound_unless_told_not_to(tmp_path):
    write_trace(tmp_path / "a.json", [1, 1, 0] * 100)
    common = ["simulate", "--trace", str(tmp_path), "--compute-hours", "4", "--deadline-hours", "8", "--processes", "1",
              "--json"]

    def policies(*more: str) -> list[str]:
        return [p["policy"] for p in json.loads(CliRunner().invoke(app, common + list(more)).output)["policies"]]

    assert policies("--policy", "default") == ["default", "omniscient"]
    assert policies("--policy", "omniscient", "--policy", "greedy") == ["omniscient", "greedy"]
    assert policies("--policy", "default", "--no-bound") == ["default"]
    assert "omniscient" not in policies("--policy", "all", "--no-bound")
    assert policies("--policy", "omniscient", "--no-bound") == ["omniscient"]  # named: run


def test_simulate_table_is_whole_when_the_output_is_not_a_terminal(tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    write_trace(tmp_path / "a.json", [1, 1, 0] * 60)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path / "a.json"), "--policy", "all",
                                      "--compute-hours", "4", "--deadline-hours", "8", "--processes", "1"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    rows = [line.split("│") for line in result.output.splitlines() if line.startswith("│ uniform_progress")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0] if cell.strip()]
    assert cells[0] == "uniform_progress" and all(len(c.split(".")[-1]) == 3 for c in cells[2:5]), cells
    assert "gap closed" in result.output and cells[-1] == "0%", cells


def test_simulate_names_a_bad_trace_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{nope")
    result = CliRunner().invoke(app, ["simulate", "--trace", str(bad)])
    assert result.exit_code == 2  # a bad argument, as a bad job file is
    assert "broken.json" in result.output and "not valid JSON" in result.output


def test_simulate_refuses_an_unknown_policy(tmp_path):
    write_trace(tmp_path / "a.json", [1] * 100)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--policy", "psychic"])
    assert result.exit_code == 2 and "--policy: unknown policy 'psychic'" in result.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--overhead-hours", "-1"], "--overhead-hours must be 0 or more, got -1"),
        (["--every-hours", "0"], "--every-hours must be a positive number, got 0"),
        (["--spot-price", "nan"], "--spot-price must be a positive number, got nan"),
        (["--compute-hours", "-2"], "--compute-hours must be a positive number, got -2"),
        # 10-minute steps: 4 h of compute and 0.1 h of overhead take 4 h 10 min on on-demand
        (["--compute-hours", "4", "--deadline-hours", "4.1"], "in whole 10-minute steps takes 4.16667 h"),
        (["--observe", "psychic"], "--observe must be one of tick, launches, drain-first, got 'psychic'"),
        (["--market-history-hours", "-1"], "--market-history-hours must be 0 or more (inf: all), got -1.0"),
        (["--market-history-hours", "nan"], "--market-history-hours must be 0 or more"),
        (["--max-price", "0"], "--max-price must be a positive number, got 0"),
        (["--on-demand-price", "1e308", "--spot-price", "1e308"], "--on-demand-price must be at most 1,000,000 $/h"),
        (["--zone-spot-price", "a"], "--zone-spot-price 'a': expected ZONE=PRICE with a positive $/h up to 1,000,000, e.g. a=0.92"),
        (["--zone-spot-price", "a=-1"], "--zone-spot-price 'a=-1': expected ZONE=PRICE"),
        (["--zone-spot-price", "a=cheap"], "--zone-spot-price 'a=cheap': expected ZONE=PRICE"),
        (["--zone-spot-price", "mars=0.5"], "no zone 'mars' in the traces; zones: a"),
        (["--bill-as", "mars"], "--bill-as must be one of aws, azure, gcp, got 'mars'"),
        (["--compute-hours", "40", "--deadline-hours", "45"], "no start offset fits"),  # the trace: 200 steps
    ],
)
def test_simulate_names_the_option_a_run_could_not_use(tmp_path, options, message):
    write_trace(tmp_path / "a.json", [1, 0] * 100)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--processes", "1", *options])
    assert result.exit_code == 2
    assert message in result.output


def test_a_deadline_just_in_reach_of_on_demand_is_met_by_every_policy(tmp_path):
    """The tightest deadline the sweep accepts: on-demand from the start finishes exactly at it, and no policy
    may miss it whatever spot does."""
    rng = np.random.default_rng(3)
    write_trace(tmp_path / "a.json", (rng.random(200) < 0.6).astype(int).tolist())
    tight = str((4 * 3600 + 600) / 3600)  # 4 h of compute + 0.1 h of overhead, rounded up to a 10-minute step
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--policy", "all", "--compute-hours", "4",
                                      "--deadline-hours", tight, "--every-hours", "2", "--json", "--processes", "1"])
    assert result.exit_code == 0, result.output
    policies = json.loads(result.output)["policies"]
    assert len(policies) == 5 and all(p["runs"] > 10 and p["misses"] == 0 for p in policies), policies


def simulate_json(*arguments: str) -> dict:
    result = CliRunner().invoke(app, ["simulate", "--json", "--processes", "1", "--policy", "on_demand", *arguments])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_simulate_takes_the_job_from_a_job_file(tmp_path):
    write_trace(tmp_path / "a.json", [1, 0, 1] * 100)
    job = tmp_path / "finetune.yaml"
    job.write_text("run: python train.py\nresources: {cloud: aws, instance_type: p3.2xlarge}\n"
                   "spot: {deadline: 30h, restart_overhead: 12m}\nestimated_duration: 24h\n")
    report = simulate_json("--trace", str(tmp_path), "--job", str(job))
    assert report["job"] == {"compute_hours": 24.0, "deadline_hours": 30.0, "overhead_hours": 0.2,
                             "on_demand_price": 3.06, "spot_price": 0.9731, "max_price": None, "nodes": 1,
                             "zone_spot_prices": {}, "bill_as": None, "file": str(job), "live": {"policy": "default", "use_spot": True, "fallback": "on-demand",
                                                        "preemptions_before_fallback": 3, "fallback_window": 3600.0,
                                                        "row": None}}
    # an option given overrides the file; a job with prices of its own is priced at them
    priced = tmp_path / "priced.yaml"
    priced.write_text("run: x\nresources: {cloud: aws, instance_type: p9.mega, prices: {on_demand: 10, spot: 2.5}}\n"
                      "spot: {deadline: '2100-01-01T00:00:00Z'}\nestimated_duration: 24h\n")
    report = simulate_json("--trace", str(tmp_path), "--job", str(priced), "--deadline-hours", "28")
    assert (report["job"]["deadline_hours"], report["job"]["on_demand_price"], report["job"]["spot_price"]) == (28, 10, 2.5)
    assert report["job"]["overhead_hours"] == 0.1  # the live policy's assumption until it has measured one


@pytest.mark.parametrize(
    ("spot", "said"),
    [
        ("{deadline: 30h, use_spot: false}", "on on-demand only (spot.use_spot: false): row 'default (use_spot: false)'"),
        ("{deadline: 30h, use_spot: false, policy: on_demand}", "on on-demand only (spot.use_spot: false), at on_demand's cost"),
        ("{deadline: 30h, fallback: wait}", "on spot only (spot.fallback: wait), waiting for spot without planning for "
                                            "the deadline: row 'default (fallback: wait)'"),
        ("{deadline: 30h, policy: uniform_progress}", "placed by policy 'uniform_progress'"),
    ],
)
def test_simulate_says_how_the_job_file_is_placed_live(tmp_path, spot, said):
    write_trace(tmp_path / "a.json", [1, 0, 1] * 100)
    job = tmp_path / "job.yaml"
    job.write_text(f"run: x\nresources: {{cloud: aws, instance_type: p3.2xlarge}}\nspot: {spot}\n"
                   "estimated_duration: 24h\n")
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--job", str(job), "--processes", "1",
                                      "--no-bound"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert said in " ".join(result.output.split())
    live = simulate_json("--trace", str(tmp_path), "--job", str(job))["job"]["live"]
    assert live["use_spot"] == ("use_spot: false" not in spot) and live["fallback"] == (
        "wait" if "wait" in spot else "on-demand")


def test_a_job_files_own_spot_settings_get_a_row_of_their_own(tmp_path):
    """A job whose policy follows its spot settings, placed otherwise than the rows assume, is also run as it would
    be live: with fallback: wait it waits for spot and misses the deadline a gap of days makes it miss, which the
    rows (free to use on-demand) do not show; its gap closed is left out, a miss being no saving."""
    write_trace(tmp_path / "a.json", [1] * 30 + [0] * 300 + [1] * 600)  # spot, then gone for 50 h, then back
    job = tmp_path / "job.yaml"
    job.write_text("run: x\nresources: {cloud: aws, instance_type: p3.2xlarge}\n"
                   "spot: {deadline: 30h, fallback: wait, restart_overhead: 6m}\nestimated_duration: 24h\n")
    report = simulate_json("--trace", str(tmp_path), "--job", str(job), "--policy", "all", "--every-hours", "50")
    assert report["job"]["live"]["row"] == "default (fallback: wait)"
    rows = {p["policy"]: p for p in report["policies"]}
    assert list(rows) == ["on_demand", "greedy", "uniform_progress", "default", "default (fallback: wait)", "omniscient"]
    waiting, planned = rows["default (fallback: wait)"], rows["default"]
    # starts at 0 h (into the gap: missed), 50 h (spot back 5 h later: kept) and 100 h (spot all along)
    assert waiting["runs"] == planned["runs"] == 3
    assert waiting["misses"] == 1 and planned["misses"] == 0 and waiting["gap_closed"] is None
    assert waiting["switches"] == 0  # never on on-demand

    job.write_text(job.read_text().replace("fallback: wait", "use_spot: false"))
    rows = {p["policy"]: p for p in simulate_json("--trace", str(tmp_path), "--job", str(job), "--every-hours", "50")["policies"]}
    assert rows["default (use_spot: false)"]["mean"] == rows["on_demand"]["mean"]

    job.write_text(job.read_text().replace("use_spot: false", "preemptions_before_fallback: 9"))
    report = simulate_json("--trace", str(tmp_path), "--job", str(job), "--every-hours", "50")
    assert report["job"]["live"]["row"] is None and len(report["policies"]) == 2  # placed as the rows assume


def refused_job_file(tmp_path, text: str):
    write_trace(tmp_path / "a.json", [1] * 100)
    job = tmp_path / "job.yaml"
    job.write_text(text)
    return job


def simulate_refused(tmp_path, job):
    """`spotrun simulate --job` on the folder's traces, which must exit 2 (a bad job file)."""
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--job", str(job)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    return result


def test_simulate_refuses_a_job_file_whose_policy_breaks_its_markets(tmp_path):
    job = refused_job_file(tmp_path, "run: x\nspot: {deadline: 30h, use_spot: false, policy: greedy}\nestimated_duration: 24h\n")
    result = simulate_refused(tmp_path, job)
    assert "policy 'greedy' places the job on spot, but spot.use_spot is false" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # the simulator's own cap was met first, and named --on-demand-price, an option not given
        ("estimated_duration: 24h\nspot: {deadline: 30h}\nresources: {prices: {on_demand: 1.0e+308, spot: 1}}\n",
         "job.yaml:4: resources.prices.on_demand: must be at most 1,000,000 $/h; got 1e+308"),
        ("estimated_duration: 24h\nspot: {deadline: 30h, max_price: 1.0e+308}\n",
         "job.yaml:3: spot.max_price: must be at most 1,000,000 $/h"),
        ("estimated_duration: 0\nspot: {deadline: 30h}\n",
         "job.yaml:2: estimated_duration: must be a positive number, got 0"),
    ],
)
def test_simulate_names_the_job_files_field_where_a_bad_number_came_from_it(tmp_path, text, said):
    output = simulate_refused(tmp_path, refused_job_file(tmp_path, "run: x\n" + text)).output
    assert said in output and "--" not in output, output


def test_simulate_refuses_spot_above_the_max_price(tmp_path):
    """The job file's spot.max_price, else --max-price, else the on-demand price caps what spot may cost: priced
    above it, spot is refused wherever it has capacity and every policy pays on-demand, which the report says."""
    write_trace(tmp_path / "a.json", [1] * 300)
    args = ["--trace", str(tmp_path), "--compute-hours", "4", "--deadline-hours", "8", "--policy", "greedy"]

    def greedy_and_omniscient(report: dict) -> list[float]:
        return [p["mean"] for p in report["policies"] if p["policy"] != "on_demand"]

    assert all(mean < 0.4 for mean in greedy_and_omniscient(simulate_json(*args)))  # spot all the way
    capped = simulate_json(*args, "--max-price", "0.9")
    assert capped["job"]["max_price"] == 0.9 and all(mean > 1 for mean in greedy_and_omniscient(capped))
    assert all(mean > 1 for mean in greedy_and_omniscient(simulate_json(*args, "--spot-price", "3.5")))
    job = tmp_path / "capped.yaml"
    job.write_text("run: x\nresources: {cloud: aws, instance_type: p3.2xlarge}\nspot: {max_price: 0.5}\n")
    from_file = simulate_json(*args, "--job", str(job))
    assert from_file["job"]["max_price"] == 0.5 and all(mean > 1 for mean in greedy_and_omniscient(from_file))
    table = CliRunner().invoke(app, ["simulate", *args, "--max-price", "0.9", "--processes", "1", "--no-bound"])
    assert table.exit_code == 0, table.output
    assert "costs more than the max price ($0.9/h)" in " ".join(table.output.split())


def test_simulate_refuses_fewer_than_one_process(tmp_path):
    write_trace(tmp_path / "a.json", [1, 0] * 100)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--processes", "0"])
    assert result.exit_code == 2 and "--processes" in result.output


def _gang_file(tmp_path, nodes: int):
    job = tmp_path / "gang.yaml"
    job.write_text(f"run: x\nresources: {{cloud: aws, instance_type: p3.2xlarge, nodes: {nodes}}}\n"
                   "spot: {deadline: 30h}\nestimated_duration: 20h\ncheckpoint: {store: 's3://bucket/run'}\n")
    return job


def test_a_gang_has_spot_only_while_the_trace_counts_all_its_nodes(tmp_path):
    rng = np.random.default_rng(2)
    write_trace(tmp_path / "counts.json", rng.integers(0, 5, size=400).tolist())  # 0-4 instances each step
    common = ["--trace", str(tmp_path), "--compute-hours", "20", "--deadline-hours", "30", "--policy", "greedy"]
    one, four = simulate_json(*common), simulate_json(*common, "--nodes", "4")
    assert (one["job"]["nodes"], four["job"]["nodes"]) == (1, 4)
    by_policy = lambda report: {p["policy"]: p for p in report["policies"]}  # noqa: E731
    # spot in 4/5 of the steps for one node, in 1/5 for four: the gang runs on-demand far more
    assert by_policy(four)["greedy"]["mean"] > by_policy(one)["greedy"]["mean"] + 0.2
    assert by_policy(four)["on_demand"]["mean"] == pytest.approx(by_policy(one)["on_demand"]["mean"])  # per job
    # the job file's nodes are the gang's unless --nodes says otherwise
    assert simulate_json("--trace", str(tmp_path), "--job", str(_gang_file(tmp_path, 4)))["job"]["nodes"] == 4
    assert simulate_json("--trace", str(tmp_path), "--job", str(_gang_file(tmp_path, 4)), "--nodes", "2")["job"][
        "nodes"] == 2


def test_a_gang_is_billed_for_all_its_nodes(tmp_path):
    write_trace(tmp_path / "counts.json", [3] * 300)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--compute-hours", "10",
                                      "--deadline-hours", "12", "--nodes", "3", "--processes", "1"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    words = " ".join(result.output.split())  # the console's width was fixed when the CLI module was first imported
    assert f"on on-demand (${3 * 3.06 * 10:,.2f} for 3 nodes)" in words and "3 nodes;" in words


@pytest.mark.parametrize("gang", [["--nodes", "2"], ["--job", "GANG"]])
def test_a_gang_on_traces_of_one_instance_is_refused(tmp_path, gang):
    write_trace(tmp_path / "a.json", [1, 0] * 150)
    options = [str(_gang_file(tmp_path, 4)) if value == "GANG" else value for value in gang]
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), *options], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "a.json counts at most one instance, so it cannot tell when a gang of" in result.output
    assert "--nodes 1" in result.output


def test_simulate_refuses_no_nodes(tmp_path):
    write_trace(tmp_path / "a.json", [1, 0] * 150)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--nodes", "0"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "--nodes must be a positive number, got 0" in result.output


def test_simulate_counts_an_absolute_deadline_from_now(tmp_path):
    from datetime import datetime, timedelta, timezone

    write_trace(tmp_path / "a.json", [1] * 300)
    deadline = (datetime.now(timezone.utc) + timedelta(hours=30)).isoformat()
    job = tmp_path / "job.yaml"
    job.write_text(f"run: x\nresources: {{cloud: aws, instance_type: p3.2xlarge}}\nspot: {{deadline: '{deadline}'}}\n"
                   "estimated_duration: 20h\n")
    assert 29.99 < simulate_json("--trace", str(tmp_path), "--job", str(job))["job"]["deadline_hours"] <= 30.0


def test_simulate_refuses_a_job_files_deadline_already_past_naming_the_field(tmp_path):
    job = refused_job_file(tmp_path, "run: x\nspot:\n  deadline: 2020-01-01T00:00:00Z\nestimated_duration: 2h\n")
    result = simulate_refused(tmp_path, job)
    assert f"{job}:3: spot.deadline: must be after now" in result.output and "--deadline-hours" in result.output
    assert "must be a positive number" not in result.output  # not blamed on an option the user never gave
    # an explicit --deadline-hours overrides the file's deadline, past or not
    assert simulate_json("--trace", str(tmp_path), "--job", str(job), "--deadline-hours", "3")["job"]["deadline_hours"] == 3


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("run: x\nspot: {deadline: 30h}\n", 2, "gives no estimated_duration: add it there or pass --compute-hours"),
        ("run: x\nestimated_duration: 3h\n", 2, "gives no spot.deadline: add it there or pass --deadline-hours"),
        ("run: x\nresources: {nodes: 0}\n", 2, "resources.nodes: must be at least 1"),
        ("run: x\nresources: {cloud: aws, instance_type: p9.mega}\nspot: {deadline: 3h}\nestimated_duration: 2h\n",
         2, "no price for instance type 'p9.mega'"),
        ("run: x\nspot: {deadline: 30h, zones: [mars-1a]}\nestimated_duration: 24h\n", 2,
         "spot.zones: no spot price for local.cpu in zone 'mars-1a'"),
    ],
)
def test_simulate_names_what_a_job_file_lacks(tmp_path, text, code, message):
    write_trace(tmp_path / "a.json", [1] * 100)
    job = tmp_path / "job.yaml"
    job.write_text(text)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--job", str(job)], env={"COLUMNS": "300"})
    assert result.exit_code == code and message in result.output, result.output


def test_replay_still_drives_the_default_policy_without_deadline():
    job = ReplayJob(job_id=1, zones=("a", "b"), compute_seconds=50.0, restart_overhead=1.0, notice_seconds=0.5)
    outage = lambda zone, t: not (zone == "a" and 10 <= t < 20)  # noqa: E731
    result = replay(job, DefaultPolicy(), outage, horizon=500.0)
    assert result.finished_at is not None and result.preemptions <= 1


def test_simulate_json_is_strict_json_with_all_the_history(tmp_path):
    write_trace(tmp_path / "a.json", [1, 1, 0] * 100)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--compute-hours", "4", "--deadline-hours",
                                      "8", "--market-history-hours", "inf", "--processes", "1", "--json"])
    assert result.exit_code == 0, result.output

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    assert json.loads(result.output, parse_constant=refuse)["market_history_hours"] == "inf"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--market-history-hours", "24"], "starts every 8 h, observe=tick, market history: 24 h"),
        (["--market-history-hours", "inf"], "observe=tick, market history: all before each start"),
        (["--observe", "launches", "--fleet"], "observe=launches, jobs run at once and share what they see"),
    ],
)
def test_the_tables_title_says_how_the_runs_were_laid_and_what_policies_saw(tmp_path, options, said):
    write_trace(tmp_path / "a.json", [1, 0, 0, 1] * 200)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(tmp_path), "--every-hours", "8", "--compute-hours",
                                      "8", "--deadline-hours", "12", "--processes", "1", *options],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert said in " ".join(result.output.split())  # the title wraps at the table's width


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("fleet", [False, True])
def test_a_sweep_reports_its_progress_in_runs(processes, fleet):
    from spotrun.sim.engine import SimJob
    from spotrun.sim.market import Market
    from spotrun.sim.sweep import sweep
    from spotrun.traces import Trace

    markets = [(name, Market.from_traces({name: Trace(600.0, np.array([1, 1, 0] * 100 + [1] * shift))}))
               for name, shift in (("a", 0), ("b", 3))]
    seen = []
    records = sweep(markets, ["greedy", "default"], SimJob(4 * 3600.0, 8 * 3600.0, 360.0), every_seconds=12 * 3600,
                    processes=processes, fleet=fleet, on_progress=lambda done, total: seen.append((done, total)))
    assert len(records) == 16  # starts at 0, 12, 24 and 36 h in each of two markets (50 h long), two policies
    dones = [done for done, _ in seen]
    assert dones == sorted(dones) and (dones[0], dones[-1]) == (0, 16) and {total for _, total in seen} == {16}
    assert len(seen) == 1 + (2 if fleet else 8)  # a fleet's market is done at once; else each start


def test_simulate_draws_its_progress_only_on_a_terminal():
    from io import StringIO

    from rich.console import Console

    from spotrun.cli.simulate import sweep_progress

    screen = StringIO()
    with sweep_progress(Console(file=screen, force_terminal=True, color_system=None, width=100)) as on_progress:
        on_progress(3, 8)
    assert "simulating" in screen.getvalue() and "3/8 runs" in screen.getvalue()
    with sweep_progress(Console(file=StringIO(), force_terminal=False)) as on_progress:
        assert on_progress is None


def test_replay_tells_the_policy_the_zones_prices_and_spaces_refused_tries():
    job = ReplayJob(job_id=1, zones=("a", "b", "c"), compute_seconds=20.0, restart_overhead=1.0, notice_seconds=0.5,
                    spot_prices={"a": 1.0, "b": 0.9, "c": 0.8})
    only_a = lambda zone, t: zone == "a"  # noqa: E731
    result = replay(job, DefaultPolicy(), only_a, horizon=500.0)
    assert [(a.zone, a.created_at, a.end_reason) for a in result.attempts] == [
        ("c", 0.0, "no_capacity"), ("b", 0.5, "no_capacity"), ("a", 1.0, "succeeded"),
    ]


def test_zones_priced_apart_are_billed_and_chosen_at_their_own_prices(tmp_path):
    """Spot everywhere all along, zone b 20% cheaper: every spot policy runs in b and pays b's price (one run each,
    from the start, with the job's overhead); the cap takes a zone out, and the report says which."""
    for zone in ("a", "b"):
        write_trace(tmp_path / f"{zone}.json", [1] * 100)
    args = ["--trace", str(tmp_path), "--multi-zone", "--compute-hours", "4", "--deadline-hours", "8",
            "--overhead-hours", "0", "--every-hours", "100", "--policy", "all"]
    same = simulate_json(*args)
    apart = simulate_json(*args, "--zone-spot-price", "a=0.9731", "--zone-spot-price", "b=0.7785")
    assert apart["job"]["zone_spot_prices"] == {"a": 0.9731, "b": 0.7785}
    for before, after in zip(same["policies"], apart["policies"]):
        if before["policy"] == "on_demand":
            assert after["mean"] == before["mean"] == pytest.approx(1.0)
        else:
            assert before["mean"] == pytest.approx(0.9731 / 3.06)
            assert after["mean"] == pytest.approx(0.7785 / 3.06), after["policy"]
    dearer = simulate_json(*args, "--zone-spot-price", "b=0.9731", "--zone-spot-price", "a=0.7785")
    assert all(p["mean"] == pytest.approx(0.7785 / 3.06) for p in dearer["policies"] if p["policy"] != "on_demand")
    capped = [*args, "--zone-spot-price", "a=0.5", "--zone-spot-price", "b=2.0", "--max-price", "1.0"]
    assert all(p["mean"] == pytest.approx(0.5 / 3.06) for p in simulate_json(*capped)["policies"]
               if p["policy"] != "on_demand")
    table = CliRunner().invoke(app, ["simulate", *capped, "--processes", "1"])
    assert table.exit_code == 0, table.output
    assert "costs more than the max price ($1/h) in b: no policy ran spot there" in " ".join(table.output.split())


def test_billed_as_ec2_the_sweep_charges_nothing_for_spot_taken_back_within_its_first_hour(tmp_path):
    """Spot for 40 minutes, then gone for 20, over and over: every spot instance is taken back in its first hour,
    so billed as EC2 greedy's spot is free and it pays only for on-demand; the report says how it billed."""
    write_trace(tmp_path / "a.json", ([1] * 4 + [0] * 2) * 40)
    args = ["--trace", str(tmp_path), "--compute-hours", "4", "--deadline-hours", "12", "--every-hours", "100",
            "--policy", "greedy", "--no-bound"]
    per_step, as_ec2 = simulate_json(*args), simulate_json(*args, "--bill-as", "aws")
    assert as_ec2["job"]["bill_as"] == "aws" and per_step["job"]["bill_as"] is None
    rows = {name: {p["policy"]: p for p in report["policies"]} for name, report in (("per step", per_step),
                                                                                      ("as EC2", as_ec2))}
    before, after = rows["per step"]["greedy"], rows["as EC2"]["greedy"]
    assert before["preemptions"] == after["preemptions"] > 0 and after["misses"] == 0
    assert after["mean"] < before["mean"] / 5  # only the instance that ran to the end is charged
    assert rows["as EC2"]["on_demand"]["mean"] == pytest.approx(rows["per step"]["on_demand"]["mean"])
    table = CliRunner().invoke(app, ["simulate", *args, "--bill-as", "aws", "--processes", "1"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "each instance charged as aws" in table.output
    azure = CliRunner().invoke(app, ["simulate", *args, "--bill-as", "azure", "--processes", "1"], env={"COLUMNS": "200"})
    assert azure.exit_code == 0 and "each instance charged as azure" in azure.output  # not GCP's, the same numbers


def test_simulate_help_shows_the_defaults_it_names():
    """rich read "[default: 48]" in the options' help as markup and printed nothing of it."""
    help_text = " ".join(CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "300"}).output.split())
    for shown in ("[default: 48]", "[default: 52]", "[default: 0.1]", "[default: 3.06, p3.2xlarge]"):
        assert shown in help_text, shown
