"""The local cloud's markets: manual preemption, random lifetimes and trace replay, plus their persistence."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spotrun.cli.main import app
from spotrun.providers.local import (
    LocalProvider,
    ManualMarket,
    MarketError,
    RandomMarket,
    TraceMarket,
    find_preemption_window,
    load_market,
    parse_market,
    set_market,
    trace_market,
)
from spotrun.traces import Trace, bundled_zone_traces, load_trace


def write_trace(path: Path, data: list[int], gap_seconds: float = 1.0) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap_seconds}, "data": data}))
    return path


def test_manual_preempt_gives_notice_then_reclaims_after_the_window(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.launch_running("pre-1")
    disk = Path(info.detail["disk"])
    asked = time.time()
    cloud.provider.preempt(info.instance_id, notice_seconds=1.0)

    notice_file = Path(info.detail["metadata"]) / "spot" / "instance-action"
    notice = json.loads(notice_file.read_text())  # written before preempt returns
    assert notice["action"] == "terminate"
    reclaim_at = datetime.fromisoformat(notice["time"]).timestamp()
    assert asked + 0.9 <= reclaim_at <= time.time() + 1.1
    during = cloud.provider.describe(info.instance_id)
    assert during.state == "running" and disk.exists()

    after = cloud.wait_for_state(info.instance_id, "terminated", timeout=5)
    assert after.reclaimed is True and after.terminated_at >= reclaim_at
    assert not disk.exists()
    assert cloud.processes_marked_with(info.instance_id) == []


def test_preempting_an_on_demand_instance_is_refused(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.provider.launch(cloud.request("pre-2", market="on-demand"))
    with pytest.raises(ValueError, match="on-demand"):
        cloud.provider.preempt(info.instance_id)


def test_terminate_during_the_notice_window_is_not_a_reclaim(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.launch_running("pre-3")
    cloud.provider.preempt(info.instance_id, notice_seconds=30)
    cloud.provider.terminate(info.instance_id)
    after = cloud.provider.describe(info.instance_id)
    assert after.state == "terminated" and after.reclaimed is False


def test_random_market_reclaims_spot_but_not_on_demand(cloud) -> None:  # type: ignore[no-untyped-def]
    cloud.provider.set_market(RandomMarket(mean_lifetime_seconds=0.5, seed=7, notice_seconds=0.2))
    spot = cloud.provider.launch(cloud.request("rand-1"))
    on_demand = cloud.provider.launch(cloud.request("rand-2", market="on-demand"))
    lifetime = RandomMarket(mean_lifetime_seconds=0.5, seed=7).lifetime_seconds(spot.instance_id)
    reclaimed = cloud.wait_for_state(spot.instance_id, "terminated", timeout=lifetime + 8)
    assert reclaimed.reclaimed is True
    assert reclaimed.detail["notice_at"] >= spot.launched_at + lifetime
    assert cloud.provider.describe(on_demand.instance_id).state in ("pending", "running")


def test_random_lifetimes_are_seeded_per_instance() -> None:
    market = RandomMarket(mean_lifetime_seconds=60, seed=1)
    assert market.lifetime_seconds("li-a") == RandomMarket(mean_lifetime_seconds=60, seed=1).lifetime_seconds("li-a")
    assert market.lifetime_seconds("li-a") != market.lifetime_seconds("li-b")
    assert market.lifetime_seconds("li-a") != RandomMarket(mean_lifetime_seconds=60, seed=2).lifetime_seconds("li-a")
    lifetimes = [market.lifetime_seconds(f"li-{n}") for n in range(2000)]
    assert 50 < float(np.mean(lifetimes)) < 70


def test_trace_replay_reclaims_when_the_zone_turns_zero(cloud, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # One sample per half a real second: available for 1 s after the start (the launches below come first), then
    # none for a long while.
    trace = write_trace(tmp_path / "a.json", [1, 1] + [0] * 100)
    start = time.time()
    cloud.provider.set_market(trace_market([trace], speed=2.0, start_epoch=start, notice_seconds=0.3))
    spot = cloud.provider.launch(cloud.request("trace-1"))
    on_demand = cloud.provider.launch(cloud.request("trace-2", market="on-demand"))
    reclaimed = cloud.wait_for_state(spot.instance_id, "terminated", timeout=8)
    assert reclaimed.reclaimed is True
    assert reclaimed.detail["notice_at"] >= start + 1.0
    assert reclaimed.terminated_at >= reclaimed.detail["notice_at"] + 0.3
    assert cloud.provider.describe(on_demand.instance_id).state == "running"


def test_a_trace_market_can_start_its_clock_at_the_first_launch(cloud, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A quarter of a second per sample: spot for 0.5 s from the start, then none for a long while.
    trace = write_trace(tmp_path / "a.json", [1, 1] + [0] * 200, gap_seconds=600)
    market = trace_market([trace], speed=2400.0, notice_seconds=0.3, clock_starts_at_first_launch=True)
    cloud.provider.set_market(market)
    time.sleep(0.75)  # a clock started when the market was set would already be past the spot samples
    assert market.spot_available("local-a", time.time())  # standing still at sample 0
    before = time.time()
    spot = cloud.provider.launch(cloud.request("first-launch-1"))
    started = load_market(cloud.provider.root)
    assert isinstance(started, TraceMarket) and started.start_epoch is not None
    assert before <= started.start_epoch <= spot.launched_at
    reclaimed = cloud.wait_for_state(spot.instance_id, "terminated", timeout=8)
    assert reclaimed.reclaimed is True
    assert reclaimed.detail["notice_at"] >= started.start_epoch + 0.5
    cloud.provider.launch(cloud.request("first-launch-2", market="on-demand"))
    assert load_market(cloud.provider.root) == started  # later launches leave the running clock alone


def test_a_trace_market_clock_starts_one_way(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", [1, 0])
    with pytest.raises(MarketError, match="start_epoch or at the first launch"):
        trace_market([trace], start_epoch=5.0, clock_starts_at_first_launch=True)
    waiting = trace_market([trace], clock_starts_at_first_launch=True)
    assert waiting.start_epoch is None and waiting.started_at(7.0).start_epoch == 7.0
    assert waiting.started_at(7.0).started_at(9.0).start_epoch == 7.0
    assert trace_market([trace]).start_epoch is not None


def test_the_market_command_sets_a_trace_replay_that_waits_for_the_first_launch(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path))
    trace = write_trace(tmp_path / "a.json", [1, 0])
    waiting = CliRunner().invoke(app, ["market", "trace", "--zone", f"local-a={trace}", "--at-first-launch"])
    assert waiting.exit_code == 0, waiting.output
    assert "at the first launch" in waiting.output
    assert load_market(tmp_path / "local-cloud") == trace_market({"local-a": trace}, clock_starts_at_first_launch=True)
    now = CliRunner().invoke(app, ["market", "trace", "--zone", f"local-a={trace}"])
    assert now.exit_code == 0, now.output
    assert load_market(tmp_path / "local-cloud").start_epoch is not None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["trace", "--speed", "0"], "--speed: input should be greater than 0, got 0.0"),
        (["trace", "--speed", "inf"], "--speed: input should be less than or equal to 1000000"),
        (["trace", "--offset", "-5", "--notice", "-1"], "--notice: input should be greater than or equal to 0, got -1.0; "
                                                         "--offset: input should be greater than or equal to 0, got -5"),
        (["random", "--mean-lifetime", "0"], "--mean-lifetime: input should be greater than 0, got 0.0"),
        (["manual", "--notice", "-2"], "--notice: input should be greater than or equal to 0, got -2.0"),
        # each was stored, and then broke every preemption or every spot launch of the local cloud
        (["manual", "--notice", "inf"], "--notice: input should be less than or equal to 3600, got inf"),
        (["random", "--mean-lifetime", "inf"], "--mean-lifetime: input should be less than or equal to"),
        (["trace", "--zone", "a.json"], "--zone takes ZONE=TRACE.json, got 'a.json'"),
    ],
)
def test_the_market_command_names_a_bad_option_and_keeps_the_market(tmp_path: Path, monkeypatch, arguments, message):
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path))
    assert CliRunner().invoke(app, ["market", "random", "--mean-lifetime", "60"]).exit_code == 0
    refused = CliRunner().invoke(app, ["market", *arguments], env={"COLUMNS": "300"})
    assert refused.exit_code == 2 and message in refused.output, refused.output
    assert "pydantic" not in refused.output
    assert load_market(tmp_path / "local-cloud") == RandomMarket(mean_lifetime_seconds=60)


def test_trace_market_time_mapping_offset_and_looping(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", [1, 0, 0, 1], gap_seconds=600)
    market = trace_market([trace], speed=600, start_epoch=1000.0, offset=3)
    assert market.spot_available("local-a", 1000.0)  # sample 3
    assert market.spot_available("local-a", 1001.0)  # sample 0 (looped)
    assert not market.spot_available("local-a", 1002.0)  # sample 1
    assert not market.spot_available("local-b", 1000.0)  # no trace for local-b
    assert market.notice_due("li-x", "local-a", launched_at=1000.0, now=1002.5)


def test_market_is_persisted_for_every_process(tmp_path: Path) -> None:
    assert load_market(tmp_path) == ManualMarket()
    market = trace_market(None, speed=600, start_epoch=123.0, offset=5, notice_seconds=2)
    set_market(tmp_path, market)
    loaded = load_market(tmp_path)
    assert isinstance(loaded, TraceMarket) and loaded == market
    assert set(loaded.traces) == {"local-a", "local-b", "local-c"}
    (tmp_path / "market.json").write_text(json.dumps({"kind": "random"}))
    with pytest.raises(MarketError, match="mean_lifetime_seconds"):
        load_market(tmp_path)


def test_bad_market_settings_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(MarketError, match="kind"):
        parse_market({"kind": "auction"})
    with pytest.raises(MarketError, match="notice_seconds"):
        parse_market({"kind": "manual", "notice_seconds": -1})
    with pytest.raises(MarketError, match="unknown zone"):
        trace_market({"us-east-1a": write_trace(tmp_path / "x.json", [1])})
    with pytest.raises(ValueError, match="no such trace file"):
        trace_market([tmp_path / "missing.json"])
    assert parse_market({"kind": "random", "mean_lifetime_seconds": 30}).notice_seconds == 5.0


def test_preemption_window_on_a_synthetic_trace() -> None:
    trace = Trace(gap_seconds=600, data=np.array([0, 1, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1]))
    window = find_preemption_window(trace, preemptions=3, window_seconds=10, speed=600)
    assert window.offset == 1 and window.preemption_seconds == [2.0, 4.0, 8.0]
    spaced = find_preemption_window(trace, preemptions=2, window_seconds=10, speed=600, min_spacing_seconds=3)
    assert spaced.offset == 1 and spaced.preemption_seconds == [2.0, 8.0]
    looping = find_preemption_window(trace, preemptions=7, window_seconds=15, speed=1200)  # the replay loops
    assert looping.offset == 1 and looping.preemption_seconds == [1.0, 2.0, 4.0, 5.5, 7.0, 8.0, 10.0, 11.5, 13.0, 14.0]
    with pytest.raises(MarketError, match="no start offset"):
        find_preemption_window(trace, preemptions=3, window_seconds=5, speed=600)


def test_preemption_window_from_a_real_trace_replays_as_promised() -> None:
    real = bundled_zone_traces()["local-a"]
    files = [real, bundled_zone_traces()["local-b"]]  # the first zone's trace decides
    window = find_preemption_window(files, preemptions=3, window_seconds=120, speed=600, first_after_seconds=10,
                                    min_spacing_seconds=15)
    assert len(window.preemption_seconds) >= 3
    market = trace_market([real], speed=600, start_epoch=0.0, offset=window.offset)
    assert market.spot_available("local-a", 0.0)
    for moment in window.preemption_seconds[:3]:
        assert 10 <= moment < 120
        assert market.spot_available("local-a", moment - 0.5) and not market.spot_available("local-a", moment + 0.01)
    assert load_trace(real).gap_seconds == 600


def test_provider_sets_the_market_from_its_json_form(tmp_path: Path) -> None:
    provider = LocalProvider(root=tmp_path, market={"kind": "random", "mean_lifetime_seconds": 5, "seed": 3})
    assert load_market(tmp_path) == RandomMarket(mean_lifetime_seconds=5, seed=3) == provider.market
    assert LocalProvider(root=tmp_path).market == provider.market  # a later provider keeps the stored market
    with pytest.raises(MarketError, match="mean_lifetime_seconds"):
        LocalProvider(root=tmp_path, market={"kind": "random"})


def test_default_root_is_under_spotrun_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    assert LocalProvider().root == (tmp_path / "home" / "local-cloud").resolve()
