"""Schemathesis drives every operation of the server's OpenAPI spec with generated requests: none may answer 5xx,
and answers must match the spec. Kept small (a few examples per operation) so it stays fast; the soak run takes twice as
many.

Requests generated from the schema alone hardly ever get past the first checks: a random `spec` is no job file, and
a random attempt id and token are nobody's. So job submissions are drawn from valid job files that hypothesis varies
(and now and then breaks), agent requests carry a real attempt's id and token (a running attempt, one that has ended,
a multi-node job's nodes), and token requests name real users and tokens; the test asserts that a real share of them
reached their handlers. Bodies the schema calls invalid, sent by callers let in, must be refused as it says."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance
from schemathesis.hooks import HookContext, HookDispatcher, HookScope
from server_world import TINY_JOB, place_attempt
from sqlalchemy import func, select

from spotrun.control import jobs as jobs_api
from spotrun.policy import markets_conflict, policy_names
from spotrun.server.app import create_app
from spotrun.server.local_cloud import LocalCloudAccess
from spotrun.server.users import add_user, create_token
from spotrun.spec import parse_spec
from spotrun.spec.notify import NOTIFY_EVENTS
from spotrun.state import Attempt, Generation, Job, Store

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
LAUNCH = "POST /api/v1/jobs"
JOB_LOGS = "GET /api/v1/jobs/{job_id}/logs"
AGENT_LOGS = "POST /agent/v1/attempts/{attempt_id}/logs"
CREATE_TOKEN = "POST /api/v1/users/{name}/tokens"
REVOKE_TOKEN = "POST /api/v1/tokens/{prefix}/revoke"
# Following a job that has not ended streams until it ends, and no job ends here (no controller runs).
NOT_FOLLOWED = {"follow": False}
AGENT_TOKEN = "fuzzed-attempts-agent-token"
FIXTURE_JOBS = 2  # TINY_JOB and GANG_JOB
GANG_JOB = """
name: gang
run: "true"
resources: {cloud: local, instance_type: local.cpu, nodes: 2}
"""


@dataclass
class World:
    app: FastAPI
    store: Store
    admin_token: str
    # Attempts whose agents hold AGENT_TOKEN: a running one, one that has ended (its agent still reporting), and the
    # two nodes of a multi-node job's running generation.
    attempt_ids: list[int]
    user_names: list[str]  # users that exist: the admin and one more
    token_prefixes: list[str]  # the other user's live tokens
    base_dir: Path  # a folder on this machine, for local jobs' `base_dir`


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The app on a fresh store, its local cloud open to every user (`create_app` launches nothing: only the
    controller does, and none runs here), an admin, a user with two tokens, and jobs with attempts in the states
    agents report from."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    now = time.time()
    admin_token = add_user(store, "root", now, admin=True).token
    prefixes = [add_user(store, "alice", now).prefix, create_token(store, "alice", now).prefix]
    job_id = jobs_api.submit(store, parse_spec(TINY_JOB), now, owner="root")
    attempt_ids = [place_attempt(store, job_id, AGENT_TOKEN), _ended_attempt(store, job_id, now),
                   *_running_gang(store, now)]
    yield World(create_app(store, local_cloud=LocalCloudAccess.ALL), store, admin_token, attempt_ids,
                ["root", "alice"], prefixes, tmp_path)
    store.dispose()


def _ended_attempt(store: Store, job_id: int, now: float) -> int:
    attempt_id = place_attempt(store, job_id, AGENT_TOKEN, number=2, at=now - 60)
    with store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        attempt.state, attempt.ended_at, attempt.end_reason = "ended", now - 30, "preempted"
    return attempt_id


def _running_gang(store: Store, now: float) -> list[int]:
    """A two-node job's attempts, their agents started, in a running generation."""
    job_id = jobs_api.submit(store, parse_spec(GANG_JOB), now, owner="root")
    nodes = [place_attempt(store, job_id, AGENT_TOKEN, number=rank + 1) for rank in range(2)]
    with store.session() as session:
        for rank, attempt_id in enumerate(nodes):
            attempt = session.get(Attempt, attempt_id)
            attempt.node_rank, attempt.address, attempt.rendezvous_port = rank, f"10.0.0.{rank + 1}", 29500
            attempt.agent_started_at = attempt.last_heartbeat_at = now
        session.add(Generation(job_id=job_id, number=1, state="running", members={"0": nodes[0], "1": nodes[1]},
                               master_addr="10.0.0.1", master_port=29500, started_at=now))
    return nodes


# Job files: valid ones, each field varied by hypothesis, and broken ones: a valid one with one value a user could
# get wrong, or with a value of any JSON type.
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=30).filter(str.strip)
SECONDS = st.one_of(st.integers(1, 86400), st.sampled_from(["90s", "10m", "1h30m", "1.5h", "1d"]))
SHORT_SECONDS = st.one_of(st.integers(1, 3600), st.sampled_from(["90s", "10m", "1h"]))  # well within any deadline
PRICES = st.floats(min_value=0.001, max_value=100)
FUTURE = st.integers(12, 24 * 365).map(lambda hours: (datetime.now(UTC) + timedelta(hours=hours)).isoformat())

LOCAL_RESOURCES = st.fixed_dictionaries(
    {"cloud": st.just("local")}, optional={"instance_type": st.just("local.cpu"), "nodes": st.integers(1, 4)}
)
# Always with prices: pricing a cloud's instance type from the catalog may ask the cloud's price list.
CLOUD_RESOURCES = st.fixed_dictionaries(
    {
        "cloud": st.sampled_from(["aws", "gcp", "azure", "kubernetes"]),
        "instance_type": st.sampled_from(["m5.large", "p3.2xlarge", "n1-standard-8", "Standard_D4s_v5"]),
        "prices": st.fixed_dictionaries({"on_demand": PRICES, "spot": PRICES}),
    },
    optional={"nodes": st.integers(1, 4), "accelerators": st.sampled_from(["nvidia-tesla-t4:1", {"nvidia-l4": 2}])},
)
SPOT = st.fixed_dictionaries({}, optional={
    "use_spot": st.booleans(),
    "fallback": st.sampled_from(["on-demand", "wait"]),
    "max_price": PRICES,
    "zones": st.lists(st.sampled_from(["us-east-1a", "us-east-1b", "local-a"]), min_size=1, max_size=3, unique=True),
    "max_wait": SECONDS,
    "deadline": st.one_of(st.sampled_from(["12h", "3d"]), FUTURE),
    "policy": st.sampled_from(policy_names()),
    "preemptions_before_fallback": st.integers(1, 20),
    "fallback_window": SECONDS,
    "notice_grace": SECONDS,
    "on_rebalance": st.sampled_from(["keep", "move"]),
    "restart_overhead": SHORT_SECONDS,
}).filter(lambda spot: markets_conflict(
    spot.get("policy", "default"), spot.get("use_spot", True), spot.get("fallback", "on-demand")) is None)
CHECKPOINT = st.fixed_dictionaries({}, optional={
    "dir": st.sampled_from(["checkpoints", "out/ckpt"]),
    "store": st.sampled_from(["s3://bucket/run", "gs://bucket/run", "/mnt/shared/ckpt", "memory://run"]),
    "sync_interval": SECONDS,
    "final_backup_timeout": SECONDS,
})
DISTRIBUTED = st.one_of(
    st.fixed_dictionaries({"launcher": st.just("env")}, optional={"gang_timeout": SECONDS}),
    st.fixed_dictionaries({"launcher": st.just("torchrun")}, optional={"procs_per_node": st.integers(1, 8)}),
)
NOTIFY = st.fixed_dictionaries(
    {"webhook": st.sampled_from(["https://hooks.slack.com/services/T0/B0/secret", "http://127.0.0.1:9/hook"])},
    optional={"events": st.lists(st.sampled_from(NOTIFY_EVENTS), min_size=1, max_size=3, unique=True)},
)
OPTIONAL_FIELDS = st.fixed_dictionaries({}, optional={
    "name": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
    "setup": TEXT,
    "workdir": st.sampled_from([".", "/"]),
    "env": st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), st.one_of(TEXT, st.integers(), st.booleans()),
        max_size=3,
    ),
    "spot": SPOT,
    "checkpoint": CHECKPOINT,
    "distributed": DISTRIBUTED,
    "max_restarts_on_error": st.integers(0, 20),
    "estimated_duration": SHORT_SECONDS,
    "notify": NOTIFY,
})


@st.composite
def job_files(draw: st.DrawFn) -> dict[str, Any]:
    job = {"run": draw(TEXT), "resources": draw(LOCAL_RESOURCES | CLOUD_RESOURCES), **draw(OPTIONAL_FIELDS)}
    if job["resources"]["cloud"] != "local" and job["resources"].get("nodes", 1) > 1:
        job["checkpoint"] = {**job.get("checkpoint", {}), "store": "s3://bucket/run"}  # a store every node sees
    return job


# One value a user could get wrong, at its field.
MISTAKES = st.sampled_from([
    (("checkpoint", "sync_interval"), "500ms"),
    (("spot", "fallback_window"), 0),
    (("spot", "deadline"), "2020-01-01T00:00:00Z"),
    (("spot", "deadline"), "2030-01-01T00:00:00"),
    (("spot", "policy"), "fastest"),
    (("spot", "zones"), ["us-east-1a", "us-east-1a"]),
    (("workdir",), "no-such-folder"),
    (("distributed",), {"procs_per_node": 2}),
    (("name",), "-dash-first"),
    (("resources", "cloud"), "moon"),
    (("resources", "nodes"), 10**6),
    (("resources", "accelerators"), "V100:0"),
    (("env",), {"1ST": "x"}),
    (("notify", "webhook"), "ftp://example.com/hook"),
    (("max_restarts_on_error",), -1),
])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=5,
)
FIELD_PATHS = st.one_of(  # fields the spec knows, and one it does not
    st.sampled_from([("run",), ("name",), ("env",), ("resources", "nodes"), ("resources", "cloud"),
                     ("resources", "prices"), ("spot", "deadline"), ("spot", "zones"), ("checkpoint", "store"),
                     ("distributed", "procs_per_node"), ("notify", "events"), ("estimated_duration",)]),
    st.text(min_size=1, max_size=10).map(lambda key: (key,)),
)


@st.composite
def broken_job_files(draw: st.DrawFn) -> dict[str, Any]:
    job = draw(job_files())
    path, value = draw(MISTAKES | st.tuples(FIELD_PATHS, JSON_VALUES))
    _set_field(job, path, value)
    return job


def _set_field(job: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    *parents, name = path
    for parent in parents:
        if not isinstance(job.get(parent), dict):
            job[parent] = {}
        job = job[parent]
    job[name] = value


def mostly(often: st.SearchStrategy[Any], rarely: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`often` three times in four, else `rarely`."""
    return st.sampled_from([often, often, often, rarely]).flatmap(lambda strategy: strategy)


def launch_requests(base_dir: Path) -> st.SearchStrategy[dict[str, Any]]:
    job_texts = mostly(job_files(), broken_job_files()).map(
        lambda job: yaml.safe_dump(job, sort_keys=False, allow_unicode=True)
    )
    return st.fixed_dictionaries(
        {"spec": job_texts},
        optional={"source": st.sampled_from(["jobs/nightly.yaml", "nightly.yml"]), "base_dir": st.just(str(base_dir))},
    )


def body_hooks(flatmap_body: Callable[[HookContext, Any], st.SearchStrategy[Any]]) -> HookDispatcher:
    """Hooks for one operation's strategy: `flatmap_body` turns each body the schema gives into a strategy."""
    hooks = HookDispatcher(scope=HookScope.TEST)
    hooks.register_hook_with_name(flatmap_body, "flatmap_body")
    return hooks


def launch_bodies(base_dir: Path) -> Callable[[HookContext, Any], st.SearchStrategy[Any]]:
    """Bodies of POST /jobs: mostly `launch_requests`, else the schema's own (random text as the job file, a random
    source and base_dir)."""
    return lambda _context, generated: mostly(launch_requests(base_dir), st.just(generated))


def log_chunks(_context: HookContext, generated: Any) -> st.SearchStrategy[Any]:
    """Log chunks: half of them at offset 0, whose part past what is stored is appended (the rest taken as a retry),
    as the schema's offsets are nearly all past the end of the log: a gap, refused 409."""
    return st.sampled_from([generated, {**generated, "offset": 0}])


def cases(operation: APIOperation, world: World) -> st.SearchStrategy[Case]:
    if operation.label == LAUNCH:
        return operation.as_strategy(hooks=body_hooks(launch_bodies(world.base_dir)))
    if operation.path.startswith("/agent/"):  # mostly to an attempt whose token is sent, else to any attempt id
        hooks = body_hooks(log_chunks) if operation.label == AGENT_LOGS else None
        return mostly(st.sampled_from(world.attempt_ids).flatmap(
            lambda attempt_id: operation.as_strategy(path_parameters={"attempt_id": attempt_id}, hooks=hooks)),
            operation.as_strategy(hooks=hooks))
    if operation.label in (CREATE_TOKEN, REVOKE_TOKEN):  # mostly a user or token that exists, else any
        parameter, values = ("name", world.user_names) if operation.label == CREATE_TOKEN else (
            "prefix", world.token_prefixes)
        return mostly(st.sampled_from(values).flatmap(
            lambda value: operation.as_strategy(path_parameters={parameter: value})), operation.as_strategy())
    return operation.as_strategy(query=NOT_FOLLOWED if operation.label == JOB_LOGS else None)


def invalid_bodies(operation: APIOperation, world: World) -> st.SearchStrategy[Case]:
    """Bodies the schema says are wrong (not JSON, a missing field, a value of the wrong type, ...), from a caller
    the operation lets in: read, then refused."""
    to_the_attempt = {"attempt_id": world.attempt_ids[0]} if operation.path.startswith("/agent/") else None
    return operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=to_the_attempt)


def fuzz(world: World, cases_of: Callable[[APIOperation, World], st.SearchStrategy[Case]],
         examples: Callable[[str], int], which: Callable[[APIOperation], bool] = lambda _operation: True,
         ) -> tuple[list[APIOperation], dict[str, Counter[int]]]:
    """Each operation `which` takes called with `examples(label)` cases of `cases_of`, each checked; the
    operations, and the statuses each answered."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", world.app)
    operations = [result.ok() for result in schema.get_all_operations() if which(result.ok())]
    statuses: dict[str, Counter[int]] = {}
    for operation in operations:
        token = AGENT_TOKEN if operation.path.startswith("/agent/") else world.admin_token
        headers = {"Authorization": f"Bearer {token}"}
        answered = statuses[operation.label] = Counter()

        @given(case=cases_of(operation, world))
        @settings(max_examples=examples(operation.label), deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def call(case: Case) -> None:
            answered[case.call_and_validate(headers=headers, checks=CHECKS).status_code] += 1

        call()
    return operations, statuses


# Examples per operation: the suite's copy of each test below draws half as many as its soak copy (the same checks).
# Each costs ~0.1 s, mostly schemathesis drawing it; with 20 launches, 10 to 19 were accepted (25 runs), 5 are needed.
LAUNCHES_AND_OTHERS = [pytest.param((20, 10), id="suite"), pytest.param((40, 20), marks=pytest.mark.soak, id="soak")]
INVALID_BODIES = [pytest.param(4, id="suite"), pytest.param(8, marks=pytest.mark.soak, id="soak")]


@pytest.mark.parametrize("examples", LAUNCHES_AND_OTHERS)
def test_no_operation_answers_5xx_or_off_spec(world: World, examples: tuple[int, int]) -> None:
    operations, statuses = fuzz(world, cases, lambda label: examples[0] if label == LAUNCH else examples[1])
    agent_api = [operation for operation in operations if operation.path.startswith("/agent/")]
    assert len(operations) - len(agent_api) == 20  # the API's 9 job, 8 user and 1 audit operations, /metrics, /healthz
    assert len(agent_api) >= 5  # and the agent API's (started, heartbeat, notice, logs, exit, ...)

    launched = sum(count for status, count in statuses[LAUNCH].items() if 200 <= status < 300)
    assert launched >= statuses[LAUNCH].total() / 4, statuses[LAUNCH]
    with world.store.session() as session:  # the fixture's jobs, and one per launch accepted: none refused was stored
        assert session.scalar(select(func.count(Job.id))) == FIXTURE_JOBS + launched
    assert statuses[CREATE_TOKEN][201] and statuses[REVOKE_TOKEN][200], (statuses[CREATE_TOKEN], statuses[REVOKE_TOKEN])
    agent_answers = sum((statuses[operation.label] for operation in agent_api), Counter())
    past_auth = sum(count for status, count in agent_answers.items() if status not in (401, 403))
    assert past_auth >= agent_answers.total() / 4, agent_answers


@pytest.mark.parametrize("examples", INVALID_BODIES)
def test_invalid_bodies_are_refused_as_the_spec_says(world: World, examples: int) -> None:
    operations, statuses = fuzz(world, invalid_bodies, lambda _label: examples,
                                which=lambda operation: bool(operation.body))
    assert len(operations) >= 10  # launch, preempt, add a user, and the agent's reports
    with world.store.session() as session:
        assert session.scalar(select(func.count(Job.id))) == FIXTURE_JOBS + statuses[LAUNCH][201]


def test_agent_api_refuses_an_attempt_id_past_the_database_integers(world: World) -> None:
    with TestClient(world.app, raise_server_exceptions=False) as client:
        response = client.post(f"/agent/v1/attempts/{2**63}/started", json={}, headers={"Authorization": "Bearer x"})
    assert response.status_code < 500
