"""An agent's report that a checkpoint took longer to save and back up than a preemption notice leaves
(`agent/save_budget.py`): one event per attempt, with the numbers; a malformed report is refused."""

from __future__ import annotations

import json

from world import SPEC

from spotrun.state import Event

SLOW = {"checkpoint_step": 7, "save_seconds": 45.0, "upload_seconds": 20.5, "budget_seconds": 30.0,
        "notice": "gcp-metadata notice"}


def test_a_slow_save_is_one_event_with_its_numbers_and_a_malformed_report_is_refused(world):
    instance = world.run_to_running(world.submit(SPEC))
    post = world.agent(instance)
    post("slow_save", SLOW)
    post("slow_save", {**SLOW, "checkpoint_step": 9})  # a repeated delivery adds nothing
    with world.store.session() as session:
        [event] = session.query(Event).filter(Event.kind == "slow_save").all()
        assert "checkpoint 7 took 45.0 s to save and 20.5 s to back up, more than the 30 s a gcp-metadata notice" \
            in event.message
        assert event.data["budget_seconds"] == 30.0

    config = json.loads(world.cloud.user_data[instance]["env"]["SPOTRUN_AGENT_CONFIG"])
    headers = {"Authorization": f"Bearer {config['token']}"}
    for bad in ({**SLOW, "upload_seconds": -1}, {**SLOW, "budget_seconds": 0}, {k: v for k, v in SLOW.items() if k != "notice"}):
        answer = world.api.post(f"/agent/v1/attempts/{config['attempt_id']}/slow_save", json=bad, headers=headers)
        assert answer.status_code == 422, bad
