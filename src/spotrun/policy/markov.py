"""Expected cost to finish by the deadline when spot availability is a semi-Markov chain over the age of its runs.

Spot's runs of "available" and "not available" are heavy-tailed, so the chain's state is the kind of run going on and
its age bucket (`run_ages`), with per-bucket hazards learned from what has been seen. The cheapest policy under that
chain is found by dynamic programming over steps left × availability state × what the job holds × work left — the
omniscient DP's model, with the future replaced by its expectation. A miss costs infinity, so a plan never takes a
risk on-demand could not cover: the deadline is kept whatever spot does, also when spot goes between two of the
plan's steps (`JobShape.spot_lost_within_step`).

Tables depend only on (job shape, hazards on a grid), so they are memoized: the policy stays a pure function of its
inputs while the simulator and the controller ask it every step. A table holds only the band of work left that a job
can be in with k steps left (no more than k steps can do, no less than the steps gone by could have done): its width
is the job's slack, so a job with little slack has a narrow table.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from spotrun.policy.run_ages import AGE_BUCKETS, RunHazards, bucket_of, bucket_width

CHAIN_STATES = 2 * len(AGE_BUCKETS)  # spot up or down, by the age bucket of its run
TABLE_BYTES_KEPT = 1 << 30  # memoized tables per process, in bytes (a 70 h job's table is ~70 MB, a 52 h job's ~10 MB)


@dataclass(frozen=True)
class JobShape:
    """Everything but the chain that a table depends on, in whole steps and progress units."""

    steps: int  # steps from the job's start to its deadline
    goal: int  # progress units the job needs
    works: tuple[int, ...]  # units made in a step by an instance that already ran 0, 1, ..., A steps
    on_demand_cost: float  # per step
    spot_cost: float  # per step
    # Spot may be lost between two of the plan's steps (the caller asks more often than the plan's step: the live
    # controller, or a trace finer than it). The chain only changes at a step, so a plan would count a step of spot
    # as done that a loss halfway through leaves undone, and near the deadline that loss could not be made up:
    # spot is then taken only while a loss at the step's worst moment could be made up (`loss_recoverable`).
    spot_lost_within_step: bool = False
    # Progress units between two of the caller's questions, when it asks between the plan's steps (0: at them)
    question: float = 0.0
    # Progress units of work a loss may undo: the trainer's save interval (inf: not known, any amount)
    save_every: float = math.inf
    # What the plan charges itself for a step of idling (a share of an on-demand step; never billed): slack spent
    # waiting for spot is worth more than a model that takes spot's hazards as known and fixed says (see
    # `DeadlineAwarePolicy.idle_charge`).
    idle_cost: float = 0.0

    @property
    def ages(self) -> int:
        return len(self.works) - 1

    @property
    def step_units(self) -> int:
        """Units a step makes once the restart overhead is paid."""
        return self.works[-1]

    @property
    def restart_units(self) -> int:
        """Units of a fresh start's steps that go to its restart overhead."""
        return sum(self.step_units - work for work in self.works)

    @property
    def table_bytes(self) -> int:
        """The size of this shape's value table (float32 over steps × chain states × held rows × band)."""
        return (self.steps + 1) * CHAIN_STATES * (1 + 2 * self.ages) * self.band_width * 4

    @property
    def band_width(self) -> int:
        """Columns of work left a table keeps per step: the slack in progress units (at least 1)."""
        return max(1, min(self.goal + 1, self.steps * max(self.works) - self.goal + 1))

    def band_start(self, steps_left: int) -> int:
        """The least work a job can have left with `steps_left` steps left, having worked every step before."""
        return max(0, self.goal - (self.steps - steps_left) * max(self.works))

    @classmethod
    @lru_cache(maxsize=1024)  # asked every step, with the same numbers all through a job's life
    def of(cls, step: float, compute: float, deadline_span: float, overhead: float, od_price: float, spot_price: float,
           unit: float, spot_lost_within_step: bool = False, idle_charge: float = 0.0,
           question: float = 0.0, save_every: float = math.inf) -> JobShape:
        ages = max(1, math.ceil(overhead / step - 1e-9))
        # whole units only: when the unit does not divide the overhead, a step's work rounds down (deadline kept)
        works = tuple(
            math.floor((step - min(max(overhead - a * step, 0.0), step)) / unit + 1e-9) for a in range(ages + 1)
        )
        return cls(
            steps=int(math.floor(deadline_span / step + 1e-9)),
            goal=math.ceil(compute / unit - 1e-9),
            works=works,
            on_demand_cost=od_price * step / 3600,
            spot_cost=spot_price * step / 3600,
            spot_lost_within_step=spot_lost_within_step,
            question=question / unit if spot_lost_within_step else 0.0,
            save_every=_lost_work_units(save_every, question, unit, works[-1]) if spot_lost_within_step else math.inf,
            idle_cost=idle_charge * od_price * step / 3600,
        )


# Held-state rows of a table: 0 = nothing, 1..A = on-demand by age, A+1..2A = spot by age.
def on_demand_row(age: int) -> int:
    return age


def spot_row(age: int, ages: int) -> int:
    return ages + age


def _shifted_down(row: np.ndarray, by: int) -> np.ndarray:
    """out[..., w] = row[..., max(w - by, 0)]: the value after `by` units of work are done."""
    if by == 0:
        return row
    out = np.empty_like(row)
    out[..., by:] = row[..., :-by]
    out[..., :by] = row[..., :1]
    return out


@lru_cache(maxsize=None)
def chain_moves(hazards: RunHazards) -> tuple[tuple[bool, ...], tuple[tuple[tuple[int, float], ...], ...]]:
    """The availability chain's states (up buckets, then down buckets) and, per state, its (next state, chance) pairs.

    A run in bucket b ends with its hazard (to bucket 0 of the other kind); otherwise it moves to the next bucket with
    chance 1 / (bucket width), a geometric stay of the bucket's mean width; the last bucket is open-ended.
    Only moves of positive chance are listed, so that an impossible move never multiplies an infinite value.
    """
    ups, downs = len(hazards.up), len(hazards.down)
    is_up = (True,) * ups + (False,) * downs
    moves = []
    for kind, first, count, other in ((hazards.up, 0, ups, ups), (hazards.down, ups, downs, 0)):
        for bucket, hazard in enumerate(kind):
            width = bucket_width(bucket, count)
            advance = 0.0 if math.isinf(width) else (1.0 - hazard) / width
            here = [(other, hazard), (first + bucket, 1.0 - hazard - advance)]
            if advance > 0:
                here.append((first + bucket + 1, advance))
            moves.append(tuple((state, chance) for state, chance in here if chance > 0))
    return is_up, tuple(moves)


Term = tuple[slice, slice, np.ndarray]  # states, their next states (same count, or one for all), chances (states × 1 × 1)


def _move_terms(moves) -> list[Term]:
    """The moves grouped into runs of consecutive states whose next states are consecutive too, or all the same one
    (the ends of runs of spot, which all go to a fresh gap, and those of gaps).

    Expectations are then a few slice products (no copies of the whole table), and since only moves of positive
    chance are listed, an impossible move never multiplies an infinite value. Each state's moves are summed in the
    same order whatever the grouping (only neighbours in the list are merged), so the values are the same to the bit.
    """
    by_shift: dict[int, list[tuple[int, int, float]]] = {}
    for state, here in enumerate(moves):
        for target, chance in here:
            by_shift.setdefault(target - state, []).append((state, target, chance))
    runs: list[list[tuple[int, int, float]]] = []
    for shift_moves in by_shift.values():
        run: list[tuple[int, int, float]] = []
        for move in sorted(shift_moves):
            if run and move[0] != run[-1][0] + 1:
                runs.append(run)
                run = []
            run.append(move)
        runs.append(run)
    return [_term(run) for run in _merged_into_one_target(runs)]


def _merged_into_one_target(runs: list[list[tuple[int, int, float]]]) -> list[list[tuple[int, int, float]]]:
    """Neighbouring runs of consecutive states that all move to one state, merged (a product broadcast over them)."""
    merged: list[list[tuple[int, int, float]]] = []
    for run in runs:
        last = merged[-1] if merged else None
        target = _one_target(run)
        if last and target is not None and _one_target(last) == target and run[0][0] == last[-1][0] + 1:
            last.extend(run)
        else:
            merged.append(list(run))
    return merged


def _one_target(run: list[tuple[int, int, float]]) -> int | None:
    targets = {target for _, target, _ in run}
    return targets.pop() if len(targets) == 1 else None


def _term(run: list[tuple[int, int, float]]) -> Term:
    first, last = run[0], run[-1]
    chances = np.array([chance for _, _, chance in run], dtype=np.float32)[:, None, None]
    target = _one_target(run)
    targets = slice(target, target + 1) if target is not None else slice(first[1], last[1] + 1)
    return slice(first[0], last[0] + 1), targets, chances


def _expected_next(nxt: np.ndarray, terms: list[Term]) -> np.ndarray:
    """after[s] = sum over s's moves of chance × nxt[next state]."""
    after = np.zeros_like(nxt)
    for states, targets, chances in terms:
        after[states] += chances * nxt[targets]
    return after


@dataclass(frozen=True)
class ValueTable:
    """Least expected costs by steps left, availability state, held row and work left, in the band of reachable work.

    `values[k, state, row, j]` is the cost with `k` steps left and `shape.band_start(k) + j` units of work left (inf: a
    miss is possible). Stored in float32: tables are large, and half-size temporaries make the DP twice as fast; costs
    are at most a few hundred dollars, far inside float32's seven digits.
    """

    shape: JobShape
    values: np.ndarray

    def reader(self, steps_left: int) -> Callable[[int, int, int], float]:
        """`read(work_left, row, state)`: the value with `steps_left` steps left; inf past the band (a sure miss).
        Less work left than the band holds reads as the band's least (never cheaper than the truth: less work never
        costs more). The band's start is found once per reader: the plan reads ~30 cells a choice, on a sweep's hot
        path, and finding it per cell was a fifth of a sweep's time."""
        layer, first, width = self.values[steps_left], self.shape.band_start(steps_left), self.values.shape[-1]

        def read(work_left: int, row: int, state: int) -> float:
            column = max(work_left - first, 0)
            return float(layer[state, row, column]) if column < width else math.inf

        return read

    def at(self, steps_left: int, state: int, row: int, work_left: int) -> float:
        return self.reader(steps_left)(work_left, row, state)


_tables: OrderedDict[tuple[JobShape, RunHazards], ValueTable] = OrderedDict()


def value_table(shape: JobShape, hazards: RunHazards) -> ValueTable:
    """The table of (shape, hazards), memoized per process up to TABLE_BYTES_KEPT, least recently used dropped first."""
    key = (shape, hazards)
    if key in _tables:
        _tables.move_to_end(key)
        return _tables[key]
    spare = _make_room(_table_dims(shape, hazards))
    table = _tables[key] = ValueTable(shape, _compute_values(shape, hazards, spare))
    return table


def _make_room(dims: tuple[int, ...]) -> np.ndarray | None:
    """Drop the least recently used tables until one of `dims` fits in TABLE_BYTES_KEPT, and hand back the memory
    of a dropped one of those dims that nothing else holds, to be written over. A fresh table's memory is faulted in
    page by page as it is filled (a 70 h job's: ~100 MB), which took a third of a sweep's table time on a VM."""
    spare = None
    while _tables and sum(t.values.nbytes for t in _tables.values()) + math.prod(dims) * 4 > TABLE_BYTES_KEPT:
        _, dropped = _tables.popitem(last=False)
        # held only by `dropped` (and getrefcount's argument): no caller keeps this table or a view of it
        if dropped.values.shape == dims and sys.getrefcount(dropped) == 2 == sys.getrefcount(dropped.values):
            spare = dropped.values
    return spare


def _table_dims(shape: JobShape, hazards: RunHazards) -> tuple[int, int, int, int]:
    return (shape.steps + 1, len(hazards.up) + len(hazards.down), 1 + 2 * shape.ages, shape.band_width)


def _compute_values(shape: JobShape, hazards: RunHazards, out: np.ndarray | None = None) -> np.ndarray:
    is_up, moves = chain_moves(hazards)
    terms = _move_terms(moves)
    up = slice(0, len(hazards.up))  # the chain lists its up states first
    rows, most = 1 + 2 * shape.ages, max(shape.works)
    table = np.empty(_table_dims(shape, hazards), dtype=np.float32) if out is None else out  # each cell is set once
    values = np.full((len(is_up), rows, shape.goal + 1), np.inf, dtype=np.float32)  # one step's values, all columns
    values[:, :, 0] = 0.0
    table[0] = np.inf
    table[0, :, :, 0] = 0.0 if shape.band_start(0) == 0 else np.inf
    for k in range(1, shape.steps + 1):
        # columns outside [first, reach) are a sure miss (more work than k steps make) or unreachable (less work than
        # the steps gone by could have left): only the band is computed, from the band below and `most` under it
        first, reach = shape.band_start(k), min(shape.goal, k * most) + 1
        if first >= reach:
            table[k] = np.inf
            continue
        below = max(first - most, 0)
        now = _step_values(_expected_next(values[:, :, below:reach], terms), shape, up, k, np.arange(below, reach))
        if below == 0:
            now[:, :, 0] = 0.0
        values[:, :, first:reach] = now[:, :, first - below:]
        table[k, :, :, : reach - first] = values[:, :, first:reach]
        table[k, :, :, reach - first :] = np.inf
    return table


def _step_values(
    after: np.ndarray, shape: JobShape, up: slice, steps_left: int, work_left: np.ndarray,
) -> np.ndarray:
    """This step's values, `steps_left` steps left, from the expected next-step values
    `after[state_now, held_next, column]`, its columns' work left `work_left`."""
    ages, works = shape.ages, shape.works
    od, spot = shape.on_demand_cost, shape.spot_cost
    down = slice(up.stop, None)
    now = np.empty_like(after)
    idle = after[:, 0] + np.float32(shape.idle_cost) if shape.idle_cost else after[:, 0]
    od_start = od + _shifted_down(after[:, on_demand_row(1)], works[0])
    spot_start = _unless_unsafe(
        spot + _shifted_down(after[up, spot_row(1, ages)], works[0]), idle[up], shape, steps_left, 0, work_left,
    )
    fresh = np.minimum(idle, od_start)  # best with nothing held (or a spot instance just preempted)
    fresh[up] = np.minimum(fresh[up], spot_start)
    now[:, 0] = fresh
    for age in range(1, ages + 1):
        later = min(age + 1, ages)
        od_keep = np.minimum(idle, od + _shifted_down(after[:, on_demand_row(later)], works[age]))
        od_keep[up] = np.minimum(od_keep[up], spot_start)
        now[:, on_demand_row(age)] = od_keep
        spot_keep = _unless_unsafe(
            spot + _shifted_down(after[up, spot_row(later, ages)], works[age]), idle[up], shape, steps_left, age,
            work_left,
        )
        now[up, spot_row(age, ages)] = np.minimum(np.minimum(idle[up], od_start[up]), spot_keep)
        now[down, spot_row(age, ages)] = fresh[down]
    return now


def _lost_work_units(save_every: float, question: float, unit: float, step_units: int) -> float:
    """The save interval in progress units, rounded up to the caller's questions (a loss is seen only at one) and at
    most a step (more undoes no more within it): a measured interval that grows by a second then makes no new table."""
    if question > 0 and math.isfinite(save_every):
        save_every = math.ceil(save_every / question - 1e-9) * question
    return min(save_every / unit, float(step_units))


def _unless_unsafe(
    spot: np.ndarray, idle: np.ndarray, shape: JobShape, steps_left: int, age: int, work_left: np.ndarray,
) -> np.ndarray:
    """A step of spot's values (columns of `work_left`, at `age`), infinite where spot lost within the step could
    not be made up, when the shape says it may be (`JobShape.spot_lost_within_step`)."""
    if not shape.spot_lost_within_step:
        return spot
    owed = shape.step_units - shape.works[age]
    safe = _spot_loss_safe(shape, steps_left, owed, work_left, work_left, np.isinf(idle))
    return np.where(safe, spot, np.float32(np.inf))


def _spot_loss_safe(shape: JobShape, steps_left: int, owed, own_work, work_left, idle_impossible):
    """Whether spot lost within the step could be made up: `loss_recoverable` where the worst moment falls within
    the step (`owed` units of restart overhead in it, then `own_work`, the job's own work left); where it is the
    step's end, unless idling the step (its work undone) then going on is impossible."""
    worst = owed + np.minimum(shape.save_every, own_work)
    return np.where(worst < shape.step_units, loss_recoverable(shape, steps_left, worst, work_left), ~idle_impossible)


def loss_recoverable(shape: JobShape, steps_left: int, worst, work_left):
    """Whether spot lost at the step's worst moment, `worst` units into it, leaves time for on-demand.

    Lost at a moment in the step, spot undoes the work since the trainer's last save, and the caller, at its next
    question, starts on-demand afresh: its restart overhead, then the work lost and the rest. The worst moment is
    once the restart overhead owed in the step and a save interval of work (or the job's own work left, if less)
    have passed: earlier, less time has gone; later, the work since the save is saved in turn, or the job is done.
    That needs no more time than the step's end does, where the plan's steps themselves say whether a fresh start
    after a lost step still finishes (`_unless_unsafe`'s `idle`). Counted as if all of `work_left` were undone."""
    return worst + shape.question + shape.restart_units + work_left <= steps_left * shape.step_units + 1e-6


def chain_state(hazards: RunHazards, available: bool, age: int) -> int:
    """The chain state of spot that is (not) available now and has been for `age` steps."""
    bucket = min(bucket_of(age), len(hazards.up if available else hazards.down) - 1)
    return bucket if available else len(hazards.up) + bucket


def transition_matrix(hazards: RunHazards) -> np.ndarray:
    """The chain's one-step transition matrix (rows: states now, columns: states at the next step)."""
    is_up, moves = chain_moves(hazards)
    matrix = np.zeros((len(is_up), len(is_up)))
    for state, here in enumerate(moves):
        for target, chance in here:
            matrix[state, target] += chance
    return matrix


@lru_cache(maxsize=4096)
def state_belief(hazards: RunHazards, seen: int | None, steps: int) -> tuple[tuple[int, float], ...]:
    """Where the chain may be `steps` steps after it was seen in state `seen` (None: never seen, the chain's long-run
    distribution), as (state, chance) pairs of positive chance."""
    matrix = transition_matrix(hazards)
    if seen is None:  # any start, run long enough to forget it
        start, steps = np.full(len(matrix), 1.0 / len(matrix)), 1 << 14
    else:
        start = np.eye(len(matrix))[seen]
    belief = start @ np.linalg.matrix_power(matrix, steps)
    belief /= belief.sum()
    return tuple((state, float(chance)) for state, chance in enumerate(belief) if chance > 1e-9)


@dataclass(frozen=True)
class StepStart:
    """Where the job stands for the plan's first step, in progress units (`deadline_aware.step_start`): the work
    left (for idling or a new instance) and, for the instance held, that work plus the restart overhead it still
    owes, at `kept_age` steps old. Work between two of the table's columns is read between them (`option_values`)."""

    work_left: float
    kept: float
    kept_age: int = 1
    # Of `work_left`, the leftover of time carried as work: done last in the plan's count, so the job's own work
    # ends that much sooner
    leftover: float = 0.0

    @classmethod
    def nothing_owed(cls, work_left: float, age: int = 1, leftover: float = 0.0) -> StepStart:
        """No instance held, or one that has paid its restart overhead."""
        return cls(work_left, work_left, age, leftover)


def option_values(
    table: ValueTable, hazards: RunHazards, steps_left: int, start: StepStart, held: str | None, state: int,
) -> dict[str, float]:
    """Expected cost of each choice for this step: "idle", "on-demand", "spot" (only when spot is up).

    Work left between two columns (seconds of progress, a leftover of time carried as work, a restart's overhead
    still to pay) is valued between theirs, in proportion: rounded up to the next unit, the choice it falls on would
    be charged up to a unit it does not owe. The value is infinite unless the column with more work left is finite,
    so the deadline is kept as with rounding up. Where the next step's spot is safe with the fewer units but not with
    the work the job will have (`_spot_forbidden_between`), its states with spot up are read at the column with more:
    the value at the fewer rests on spot the job will be refused."""
    shape = table.shape
    is_up, moves = chain_moves(hazards)
    ages, works = shape.ages, shape.works

    at = table.reader(steps_left - 1)

    def expected(work_left: float, row: int, work: int) -> float:
        left = work_left - work
        whole = round(left)
        if abs(left - whole) < 1e-9:
            return sum(chance * at(whole, row, target) for target, chance in moves[state])
        below = math.floor(left)
        share = left - below  # > 0: an infinite value above makes this one infinite
        cliff = _spot_forbidden_between(shape, steps_left - 1, row, below, left)
        return sum(
            chance * (at(below + 1, row, target) if cliff and is_up[target] else
                      (1.0 - share) * at(below, row, target) + share * at(below + 1, row, target))
            for target, chance in moves[state]
        )

    def started(market: str) -> tuple[float, int]:
        """Work left at the step's start and the instance's age when the step runs on `market`."""
        return (start.kept, start.kept_age) if held == market else (start.work_left, 0)

    od_work, od_age = started("on-demand")
    values = {
        "idle": shape.idle_cost + expected(start.work_left, 0, 0),
        "on-demand": shape.on_demand_cost + expected(od_work, on_demand_row(min(od_age + 1, ages)), works[od_age]),
    }
    if is_up[state]:
        spot_work, spot_age = started("spot")
        values["spot"] = shape.spot_cost + expected(
            spot_work, spot_row(min(spot_age + 1, ages), ages), works[spot_age]
        )
        if shape.spot_lost_within_step and not _spot_step_recoverable(shape, steps_left, start, spot_work, spot_age,
                                                                      values["idle"]):
            values["spot"] = math.inf
    return values


def _spot_forbidden_between(shape: JobShape, steps_left: int, row: int, below: int, work_left: float) -> bool:
    """Whether the spot a `row` may take or hold with `steps_left` steps left is safe with `below` units of work
    left but not with `work_left` (> below): the table's value at `below` may rest on holding spot that the job,
    with more work, may not hold, so reading between the columns would count on spot it will be refused."""
    if not shape.spot_lost_within_step or steps_left < 1:
        return False
    ages = shape.ages
    owed = shape.step_units - shape.works[row - ages if row > ages else 0]  # holding spot of that age, or a fresh start

    def safe(work: float) -> bool:  # the table's rule; idling then a fresh start cannot finish: its `idle` is inf
        idle_impossible = work + shape.restart_units > (steps_left - 1) * shape.step_units + 1e-6
        return bool(_spot_loss_safe(shape, steps_left, owed, work, work, np.bool_(idle_impossible)))

    return safe(below) and not safe(work_left)


def _spot_step_recoverable(
    shape: JobShape, steps_left: int, start: StepStart, spot_work: float, spot_age: int, idle: float,
) -> bool:
    """`_unless_unsafe` for the plan's first step: the restart overhead still owed is what `spot_work` holds over
    the work left, and the job's own work ends the leftover carried as work before the plan's count of it does."""
    owed = spot_work - start.work_left + shape.step_units - shape.works[spot_age]
    own_work = max(start.work_left - start.leftover, 0.0)
    return bool(_spot_loss_safe(shape, steps_left, owed, own_work, start.work_left, np.bool_(math.isinf(idle))))
