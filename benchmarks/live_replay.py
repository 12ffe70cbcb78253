"""The real controller on a spot trace beside the simulator on the same trace: does a deadline job placed live cost
what the simulator says it costs?

    python benchmarks/live_replay.py                                   # every 1-node trace, one start each
    python benchmarks/live_replay.py --policy uniform_progress --progress none
    python benchmarks/live_replay.py --compute-hours 4 --deadline-hours 6 --trace FILE --start-hours 12
    python benchmarks/live_replay.py --zones-together        # both zones of each GPU type as one market
    python benchmarks/live_replay.py --save-every 300 --notice 120   # the SDK's default saves, AWS's notice
    python benchmarks/live_replay.py --nodes 2                       # a multi-node job, its nodes in one zone
    python benchmarks/live_replay.py --notice 120 --bill-as aws      # billed as EC2 bills (first hour free)

For each trace and start: a job with `spot.deadline`, `estimated_duration` and `spot.restart_overhead` runs under
the real controller (its store on SQLite, a manual clock ticking every `--tick` seconds) in a cloud whose one zone
has spot capacity as the trace says; a spot instance running where the trace goes to 0 is taken back without notice
(with `--notice N`: its agent is told N seconds before, and the zone takes no new spot instance in those N seconds).
Each instance's trainer is played over the agent API: it reports in, trains one step a second once the restart
overhead has passed since its launch (for a standby, since the job's previous instance let it go), saves a
checkpoint at every tick (`--save-every`) and reports the newest (with the run's total steps; `--progress steps`:
without them, so the policy counts the steps at the measured rate; `--progress none`: no reports, so it counts the
instances' times), saves and stops when asked or told of a preemption, and exits once its steps are done. A
preemption without notice loses the steps since its last save. With `--nodes N` the job is a gang of N nodes in the
trace's zone, each played as its agent (reports in, follows its generation's orders); their ranks train together
while a generation runs with every member up (`GangTrainers`). The bill is the ledger's: each instance's seconds at
its price (`--bill-as aws`: charged as EC2 charges, nothing for an instance it takes back in its first hour, and a
minute at least; the notice then comes from the cloud, so the controller leaves such an instance for the cloud to
take, and with `--terminate-on-notice` terminates it itself as a notice from elsewhere would have it). The simulator runs the same job on the same trace from the same start in its "launches" view (the
policy sees spot only through its launches, its instance and preemptions, as the controller does). Prints a
Markdown table: cost over the on-demand cost, live and simulated, hours to finish, preemptions and launches per
run, and the means.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from spotrun.control import jobs
from spotrun.control.clock import ManualClock
from spotrun.cli.simulate import parse_zone_price
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.costs.billing import CLOUD_RULES
from spotrun.costs.ledger import bill
from spotrun.providers import InstanceInfo, LaunchRequest
from spotrun.server.agent_api import create_agent_app
from spotrun.sim.engine import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT, SimJob, run_job
from spotrun.sim.market import Market
from spotrun.sim.sweep import policy_for
from spotrun.spec import parse_spec
from spotrun.state import Event, Job, Store
from spotrun.traces import Trace, list_traces, load_trace, shared_traces_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "control"))
from memory_cloud import MemoryCloud  # noqa: E402  (the controller tests' in-memory cloud)
from world import agent_poster  # noqa: E402  (their agent, speaking the agent API)

HOUR = 3600.0
STEP_SECONDS = 1.0  # the trainer's step: one a second, so steps are seconds of compute


class TraceCloud(MemoryCloud):
    """The tests' in-memory cloud, with each zone's spot capacity a trace's, on the controller's clock from `origin`
    on."""

    def __init__(self, clock: ManualClock, traces: dict[str, Trace], origin: float, notice: float = 0.0) -> None:
        super().__init__(clock, zones=tuple(traces))
        self.traces, self.origin, self.notice = traces, origin, notice

    def spot_up(self, zone: str, ahead: float = 0.0) -> bool:
        return self.traces[zone].available(self.clock.now() + ahead - self.origin)

    def spot_leaving(self, zone: str) -> bool:
        """Whether the zone's spot goes within the notice: its instances are told, and it takes no new ones."""
        return self.notice > 0 and self.spot_up(zone) and not self.spot_up(zone, ahead=self.notice)

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        self.capacity[request.zone] = self.spot_up(request.zone) and not self.spot_leaving(request.zone)
        return super().launch(request)

    def take_back_spot(self) -> None:
        """The trace's market moves on: spot instances where it has no spot now are taken back."""
        for info in self.running():
            if info.market == "spot" and not self.spot_up(info.zone):
                self.reclaim(info.instance_id)


class QuotingTraceCloud(TraceCloud):
    """A trace cloud whose zones' spot is priced apart, quoted as EC2 quotes it (`AwsProvider.spot_prices`)."""

    def __init__(self, *args, zone_prices: dict[str, float], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.zone_prices = zone_prices

    def spot_prices(self, instance_type: str) -> dict[str, float]:
        return {zone: self.zone_prices.get(zone, P3_2XLARGE_SPOT) for zone in self.traces}


RESUME_ME = {"outcome": "preempted", "exit_code": 75, "checkpoint_synced": True}  # saved, stopped: place me again


@dataclass
class Training:
    """One training run's clock: from when and which step it trains (None: not training), and its newest save."""

    training_from: float | None = None
    resumed_at_step: int = 0
    saved_step: int = 0
    saved_at: float = 0.0
    saves: int = 0  # timed saves so far: which gap of the save cycle comes next

    def steps(self, now: float, total: int) -> int:
        if self.training_from is None:
            return self.resumed_at_step
        return min(self.resumed_at_step + int(max(now - self.training_from, 0.0) / STEP_SECONDS), total)

    def resume(self, at: float, step: int) -> None:
        """Train from `at` on (booted, set up and restored by then), from checkpoint `step`."""
        self.training_from = self.saved_at = at
        self.resumed_at_step = self.saved_step = step

    def wait_for(self, ready: float) -> None:
        """Train from `ready` on at the earliest (a node that joins is booted, set up and restored by then)."""
        if self.training_from is not None and self.training_from < ready:
            self.training_from = self.saved_at = ready

    def save_if_due(self, now: float, total: int, every: tuple[float, ...]) -> None:
        """Save once the gap due is over (`every`: the gaps in turn, a cycle) or the run is done."""
        steps = self.steps(now, total)
        if self.training_from is not None and (steps >= total or now - self.saved_at >= every[self.saves % len(every)]):
            self.saved_step, self.saved_at, self.saves = steps, now, self.saves + 1

    def stop(self, now: float, total: int, save: bool) -> None:
        """Stop training: after a save (an orderly stop), or losing the steps since the last one."""
        if self.training_from is not None and save:
            self.saved_step, self.saved_at = self.steps(now, total), now
        self.training_from = None


def report(step: int, total: int, progress: str) -> dict:
    """A heartbeat's body: the newest checkpoint, once there is one, as far as the trainer reports."""
    if progress == "none" or step <= 0:
        return {}
    return {"checkpoint_step": step, "total_steps": total if progress == "total" else None}


@dataclass
class Trainer(Training):
    """One instance's trainer, as its agent tells the controller about it."""

    post: object = None  # (path, body) -> reply
    launched_at: float = 0.0
    reported_in: bool = False
    done: bool = False


class Agents:
    """What the replay plays of a job's agents, whatever its nodes: the run's total steps, how the trainers save and
    report, and the notice of a preemption, passed on."""

    def __init__(self, api: TestClient, cloud: TraceCloud, total: int, setting: Setting) -> None:
        self.api, self.cloud, self.total = api, cloud, total
        self.overhead, self.progress = setting.overhead, setting.progress
        self.save_every = setting.save_every or (setting.tick,)
        self.notice_source = "replay" if setting.terminate_on_notice else "local-metadata"  # the trace cloud's own

    def pass_notice(self, post, now: float) -> None:
        post("notice", {"source": self.notice_source, "deadline": now + self.cloud.notice})


class Trainers(Agents):
    """Every instance's trainer, and the job's newest checkpoint (what the next trainer resumes from)."""

    def __init__(self, api: TestClient, cloud: TraceCloud, total: int, setting: Setting) -> None:
        super().__init__(api, cloud, total, setting)
        self.by_instance: dict[str, Trainer] = {}
        self.saved = 0

    def beat(self, now: float) -> None:
        for info in self.cloud.running():
            trainer = self.by_instance.get(info.instance_id)
            if trainer is None:
                post = agent_poster(self.api, self.cloud.user_data[info.instance_id])
                trainer = self.by_instance[info.instance_id] = Trainer(post=post, launched_at=info.launched_at)
            if not trainer.done:
                self._beat(trainer, now, info.market == "spot" and self.cloud.spot_leaving(info.zone))
            self.saved = max(self.saved, trainer.saved_step)

    def _beat(self, trainer: Trainer, now: float, noticed: bool) -> None:
        if not trainer.reported_in:
            trainer.post("started", {"address": "127.0.0.1"})
            trainer.reported_in = True
        if noticed:  # the agent passes the notice on, the trainer saves, the agent reports it and exits
            self.pass_notice(trainer.post, now)
            self._stop(trainer, now)
            return
        trainer.save_if_due(now, self.total, self.save_every)
        reply = trainer.post("heartbeat", self._report(trainer))
        if reply.get("stop"):
            self._stop(trainer, now)
        elif trainer.saved_step >= self.total:
            trainer.post("exit", {"outcome": "succeeded", "exit_code": 0, "checkpoint_synced": True})
            trainer.done = True
        elif trainer.training_from is None and not reply.get("hold"):
            # booted, set up and restored by its overhead after launch; a standby restores once let go
            trainer.resume(max(trainer.launched_at + self.overhead, now), self.saved)

    def _report(self, trainer: Trainer) -> dict:
        return report(trainer.saved_step if trainer.training_from is not None else 0, self.total, self.progress)

    def _stop(self, trainer: Trainer, now: float) -> None:
        """Save (when training), report that checkpoint, exit "resume me"."""
        if trainer.training_from is not None:
            trainer.stop(now, self.total, save=True)
            trainer.post("heartbeat", report(trainer.saved_step, self.total, self.progress))
        trainer.post("exit", RESUME_ME)
        trainer.done = True


class GangTrainers(Agents):
    """A multi-node job's nodes, each played as its agent, and the one training run their ranks make together: it
    trains while a generation runs with every member up, from the restart overhead after its newest member's launch
    on (as a single node's trainer does: a member that waited as a standby is ready when the generation begins),
    saves every `save_every` and when the generation is stopped in order (a move, a notice), and loses what it did
    since its last save when a member goes without notice. Node 0 reports the checkpoints."""

    def __init__(self, api: TestClient, cloud: TraceCloud, total: int, setting: Setting) -> None:
        super().__init__(api, cloud, total, setting)
        self.posts: dict[str, object] = {}
        self.rank_of: dict[str, int] = {}
        self.exited: set[tuple[str, int]] = set()  # (instance, generation) whose command has exited
        self.gone: set[str] = set()  # instances whose attempt ended (told of a preemption, or asked to stop)
        self.generation, self.members = 0, set()
        self.launched_at: dict[str, float] = {}
        self.run = Training()

    def beat(self, now: float) -> None:
        nodes = [info for info in self.cloud.running() if info.instance_id not in self.gone]
        for info in nodes:
            if info.instance_id not in self.posts:
                self.launched_at[info.instance_id] = info.launched_at
                self.posts[info.instance_id] = post = agent_poster(self.api, self.cloud.user_data[info.instance_id])
                post("started", {"address": f"10.0.0.{len(self.posts)}", "port": 29500})
        if not self.members <= {info.instance_id for info in nodes}:
            self.run.stop(now, self.total, save=False)  # a member went without notice: the ranks fail
        for info in nodes:
            if info.market == "spot" and self.cloud.spot_leaving(info.zone):
                self.pass_notice(self.posts[info.instance_id], now)
                self._end_attempt(info.instance_id, now)
        self.run.save_if_due(now, self.total, self.save_every)
        for info in nodes:
            if info.instance_id not in self.gone:
                self._follow(info.instance_id, now)

    def _follow(self, instance: str, now: float) -> None:
        step = self.run.saved_step if self.rank_of.get(instance) == 0 else 0
        reply = self.posts[instance]("heartbeat", report(step, self.total, self.progress))
        if reply.get("stop"):  # its node is moved: the generation stops in order
            self._end_attempt(instance, now)
            return
        order = reply.get("gang")
        if order is None:
            return
        self.rank_of[instance] = order["node_rank"]
        number = order["generation"]
        if order["state"] == "running" and number > self.generation:  # a new generation: every rank restores
            self.generation, self.members = number, set()
            self.run.resume(now, self.run.saved_step)
        if number == self.generation and order["state"] == "running":
            self.members.add(instance)
            self.run.wait_for(self.launched_at[instance] + self.overhead)
            if self.run.saved_step >= self.total:
                self._command_exited(instance, 0)
        elif number == self.generation:  # stopping or ended: save in order if every rank is still there
            self.run.stop(now, self.total, save=order["state"] == "stopping")
            self._command_exited(instance, 75)

    def _end_attempt(self, instance: str, now: float) -> None:
        """The node's agent ends its attempt "resume me", its rank (a member's; a standby runs none) having saved
        with the others first."""
        if instance in self.members:
            self.run.stop(now, self.total, save=True)
            self._command_exited(instance, 75)
        self.posts[instance]("exit", RESUME_ME)
        self.gone.add(instance)

    def _command_exited(self, instance: str, code: int) -> None:
        if (instance, self.generation) not in self.exited and self.generation > 0:
            self.exited.add((instance, self.generation))
            self.posts[instance]("generation_exit", {"generation": self.generation, "exit_code": code})


@dataclass(frozen=True)
class Setting:
    compute: float
    deadline: float
    overhead: float
    policy: str
    tick: float
    progress: str  # what the trainers report: "total" (steps and total steps), "steps", "none"
    overhead_named: bool = True  # False: the job file names no restart overhead, the controller measures it
    save_every: tuple[float, ...] | None = None  # seconds between the trainer's checkpoints, in turn (None: a tick)
    nodes: int = 1  # > 1: a multi-node job, every node in the trace's zone
    notice: float = 0.0  # seconds of notice before spot is taken back (0: none)
    story: bool = False  # print each run's attempts and events (stderr)
    # $/h of spot in zones priced apart (the others: p3.2xlarge's), quoted by the cloud; the job file then gives no
    # prices of its own, and the controller takes them from its price function (`MarketPrices`) as it would on AWS
    zone_prices: tuple[tuple[str, float], ...] = ()
    bill_as: str = "local"  # whose billing rule charges the instances (`costs.billing.CLOUD_RULES`)
    terminate_on_notice: bool = False  # the notice comes from the trainer's side, not the cloud's metadata


@dataclass(frozen=True)
class Outcome:
    cost: float  # over the on-demand cost of the compute
    finished_hours: float | None
    preemptions: int
    launches: int


def job_text(setting: Setting) -> str:
    overhead = f"restart_overhead: {setting.overhead:.0f}s, " if setting.overhead_named else ""
    # local.cpu is priced as p3.2xlarge in the catalog: without prices of its own, the job pays the cloud's quotes
    prices = "" if setting.zone_prices else f", prices: {{on_demand: {P3_2XLARGE_ON_DEMAND}, spot: {P3_2XLARGE_SPOT}}}"
    return f"""
name: replay
run: "true"
resources: {{cloud: local, instance_type: local.cpu, nodes: {setting.nodes}{prices}}}
spot: {{deadline: {setting.deadline:.0f}s, {overhead}policy: {setting.policy}}}
estimated_duration: {setting.compute:.0f}s
"""


def run_live(traces: dict[str, Trace], start: int, setting: Setting, folder: Path) -> Outcome:
    """The job under the real controller from sample `start` of the zones' traces, until it ends or the deadline is
    2 h past."""
    os.environ["SPOTRUN_HOME"] = str(folder / "home")
    store = Store(f"sqlite:///{folder / 'state.db'}")
    try:
        clock = ManualClock(1.7e9)
        gap = next(iter(traces.values())).gap_seconds
        origin = clock.now() - start * gap
        cloud = (
            QuotingTraceCloud(clock, traces, origin, setting.notice, zone_prices=dict(setting.zone_prices))
            if setting.zone_prices else TraceCloud(clock, traces, origin, setting.notice)
        )
        settings = ControllerSettings(
            controller_url="http://unused", heartbeat_timeout=2.5 * setting.tick, boot_timeout=3 * setting.tick,
            billing_rules={"local": CLOUD_RULES[setting.bill_as]},
        )
        controller = Controller(store, settings, clock=clock, provider_factory=lambda _: cloud)
        play = GangTrainers if setting.nodes > 1 else Trainers
        total = round(setting.compute / STEP_SECONDS)
        trainers = play(TestClient(create_agent_app(store, clock)), cloud, total, setting)
        submitted = clock.now()
        job_id = jobs.submit(store, parse_spec(job_text(setting)), submitted)
        while clock.now() < submitted + setting.deadline + 2 * HOUR:
            clock.advance(setting.tick)
            cloud.take_back_spot()
            trainers.beat(clock.now())
            controller.tick()
            if job_state(store, job_id) in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
        if setting.story:
            print(story(store, job_id, submitted), file=sys.stderr)
        return outcome(store, job_id, clock.now(), submitted, setting)
    finally:
        store.dispose()


def story(store: Store, job_id: int, submitted: float) -> str:
    """The job's attempts and events, minutes from submission: what a run's cost came from."""
    def minutes(at: float | None) -> str:
        return "-" if at is None else f"{(at - submitted) / 60:.0f}"

    with store.session() as session:
        job = session.get(Job, job_id)
        lines = [f"job {job_id}: {job.state}, {job.preemptions} preemptions"]
        lines += [
            f"  attempt {a.number} {a.market} {a.zone}: launched {minutes(a.created_at)}, up {minutes(a.started_at)}, "
            f"ended {minutes(a.ended_at)} ({a.end_reason}), checkpoint step {a.checkpoint_step}"
            for a in job.placed_attempts
        ]
        events = session.scalars(select(Event).where(Event.job_id == job_id).order_by(Event.id))
        lines += [f"  {minutes(e.at)} min {e.kind}: {e.message}" for e in events]
    return "\n".join(lines)


def job_state(store: Store, job_id: int) -> str:
    with store.session() as session:
        return session.get(Job, job_id).state


def outcome(store: Store, job_id: int, now: float, submitted: float, setting: Setting) -> Outcome:
    with store.session() as session:
        job = session.get(Job, job_id)
        placed = list(job.placed_attempts)
        cost = bill(placed, now).cost
        finished = job.finished_at if job.state == "SUCCEEDED" else None
        return Outcome(
            cost=cost / (P3_2XLARGE_ON_DEMAND * setting.compute / HOUR * setting.nodes),
            finished_hours=None if finished is None else (finished - submitted) / HOUR,
            preemptions=job.preemptions,
            launches=len(placed),
        )


def run_simulated(traces: dict[str, Trace], start: int, setting: Setting) -> Outcome:
    market = Market.from_traces(traces)
    job = SimJob(setting.compute, setting.deadline, setting.overhead, zone_spot_prices=setting.zone_prices)
    policy = policy_for(setting.policy, market, start, job)
    result = run_job(policy, market.zones, market.available[:, start:], market.gap_seconds, job, observe="launches")
    return Outcome(
        cost=result.cost / job.on_demand_cost,
        finished_hours=None if result.finished_at is None else result.finished_at / HOUR,
        preemptions=result.preemptions,
        launches=result.launches,
    )


def table(rows: list[tuple[str, int, Outcome, Outcome]], setting: Setting) -> str:
    lines = [
        f"C = {setting.compute / HOUR:g} h, D = {setting.deadline / HOUR:g} h, d = {setting.overhead / HOUR:g} h, "
        f"policy {setting.policy}, ticks of {setting.tick:g} s, progress reported: {setting.progress}, restart overhead "
        f"{'named' if setting.overhead_named else 'measured'}, a checkpoint every "
        f"{','.join(f'{s:g}' for s in setting.save_every or (setting.tick,))} s, {setting.notice:g} s of notice"
        + (f", billed as {setting.bill_as} bills" if setting.bill_as != "local" else "")
        + (", the controller terminating on notice" if setting.terminate_on_notice else ""),
        "",
        "| trace | start, h | cost live / sim | finished h, live / sim | preemptions live / sim | launches live / sim |",
        "| --- | ---: | --- | --- | --- | --- |",
    ]
    for name, start_hours, live, sim in rows:
        lines.append(
            f"| {name} | {start_hours:g} | {live.cost:.3f} / {sim.cost:.3f} | {_hours(live)} / {_hours(sim)} | "
            f"{live.preemptions} / {sim.preemptions} | {live.launches} / {sim.launches} |"
        )
    if rows:
        mean_live = sum(r[2].cost for r in rows) / len(rows)
        mean_sim = sum(r[3].cost for r in rows) / len(rows)
        missed = sum(1 for r in rows if r[2].finished_hours is None or r[2].finished_hours > setting.deadline / HOUR + 1e-9)
        lines += ["", f"mean cost: live {mean_live:.4f}, simulated {mean_sim:.4f} (live / sim {mean_live / mean_sim:.3f}); "
                      f"live deadlines missed: {missed} of {len(rows)}"]
    return "\n".join(lines)


def _hours(result: Outcome) -> str:
    return "-" if result.finished_hours is None else f"{result.finished_hours:.1f}"


def markets(paths: list[Path], zones_together: bool) -> dict[str, dict[str, Trace]]:
    """The markets to run in, by name: each trace alone (its zone named after the file), or with `zones_together`
    the traces of one instance type (named `<zone>_<type>`) as the zones of one market."""
    found: dict[str, dict[str, Trace]] = {}
    for path in paths:
        zone, _, kind = path.stem.partition("_")
        name = kind if zones_together and kind else path.stem
        found.setdefault(name, {})[path.stem if not zones_together else zone] = load_trace(path)
    return found


def save_cycle(text: str) -> tuple[float, ...]:
    """`--save-every`'s value: one or more positive seconds, comma-separated."""
    try:
        gaps = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not seconds, comma-separated: {text!r}") from None
    if not all(gap > 0 for gap in gaps):
        raise argparse.ArgumentTypeError(f"every gap between saves must be positive: {text!r}")
    return gaps


def zone_price(text: str) -> tuple[str, float]:
    try:
        return parse_zone_price(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(f"{problem}: {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", type=Path, help="trace files (default: every 1-node trace)")
    parser.add_argument("--start-hours", type=float, action="append", help="start offsets (default: 0)")
    parser.add_argument("--compute-hours", type=float, default=48.0)
    parser.add_argument("--deadline-hours", type=float, default=52.0)
    parser.add_argument("--overhead-hours", type=float, default=0.1)
    parser.add_argument("--policy", default="default")
    parser.add_argument("--tick", type=float, default=60.0, help="seconds between the controller's ticks")
    parser.add_argument("--zones-together", action="store_true",
                        help="the traces of one instance type (<zone>_<type>.json) as the zones of one market")
    parser.add_argument("--measure-overhead", action="store_true",
                        help="the job file names no restart overhead: the controller measures it from the reports")
    parser.add_argument("--progress", choices=("total", "steps", "none"), default="total",
                        help="what the trainers report: their steps and the total, their steps, nothing")
    parser.add_argument("--save-every", type=save_cycle,
                        help="seconds between the trainer's checkpoints (default: a tick); several, comma-separated, "
                             "are its gaps in turn, as a trainer that sometimes goes longer (an evaluation)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes of the job, all in the trace's zone (default 1)")
    parser.add_argument("--notice", type=float, default=0.0,
                        help="seconds of notice before spot is taken back (default 0: none)")
    parser.add_argument("--story", action="store_true", help="each run's attempts and events, on stderr")
    parser.add_argument("--bill-as", choices=sorted(CLOUD_RULES), default="local",
                        help="charge the instances by this cloud's billing rule (default: the seconds held)")
    parser.add_argument("--terminate-on-notice", action="store_true",
                        help="the notice does not come from the cloud: the controller terminates the instance itself")
    parser.add_argument("--zone-spot-price", type=zone_price, action="append", default=[],
                        help="ZONE=PRICE: $/h spot in that zone (a trace's name), quoted by the cloud (repeatable)")
    args = parser.parse_args(argv)
    setting = Setting(args.compute_hours * HOUR, args.deadline_hours * HOUR, args.overhead_hours * HOUR, args.policy,
                      args.tick, args.progress, not args.measure_overhead, args.save_every, args.nodes, args.notice,
                      args.story, tuple(args.zone_spot_price), args.bill_as, args.terminate_on_notice)
    paths = args.trace or list_traces(shared_traces_dir() / "availability" / "1-node" / "aws-10-26-2022")
    rows = []
    began = time.perf_counter()
    chosen = markets(paths, args.zones_together)
    zones = {zone for traces in chosen.values() for zone in traces}
    if unknown := sorted({zone for zone, _ in setting.zone_prices} - zones):
        parser.error(f"--zone-spot-price: no zone {', '.join(unknown)} in these markets; zones: {', '.join(sorted(zones))}")
    for name, traces in chosen.items():
        for start_hours in args.start_hours or [0.0]:
            start = round(start_hours * HOUR / next(iter(traces.values())).gap_seconds)
            with tempfile.TemporaryDirectory(prefix="spotrun-replay-") as folder:
                live = run_live(traces, start, setting, Path(folder))
            rows.append((name, start_hours, live, run_simulated(traces, start, setting)))
    print(table(rows, setting))
    print(f"\n{time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
