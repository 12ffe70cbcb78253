"""A gang's nodes end together: the default policy counts how often the job was preempted, or went back to spot, not
how many of its tries ended so."""

from spotrun.policy import DefaultPolicy, PastAttempt, PlacementContext
from spotrun.policy.default import count_events, recent_preemptions, returns_to_spot

HOUR = 3600.0


def tried(created, ended, reason="preempted", market="spot", zone="z"):
    return PastAttempt(zone, market, created, created + 60, ended, reason)


def test_nodes_taken_back_together_or_a_minute_apart_are_one_preemption():
    together = [tried(0.0, 1000.0) for _ in range(4)]
    assert count_events(together) == 1
    cascade = [tried(0.0, 1000.0), tried(0.0, 1060.0), tried(0.0, 1075.0)]
    assert count_events(cascade) == 1


def test_a_try_launched_after_a_preemption_ends_in_one_of_its_own():
    one_node = [tried(0.0, 1000.0), tried(1100.0, 1500.0), tried(1600.0, 1700.0)]
    assert count_events(one_node) == 3
    # node 0 taken first and replaced; the others taken with it a minute later; then the replacement alone
    gang = [tried(0.0, 1000.0), tried(0.0, 1060.0), tried(0.0, 1060.0), tried(1010.0, 2000.0)]
    assert count_events(gang) == 2
    assert count_events([]) == 0


def test_a_try_still_ending_counts_with_the_latest_event():
    assert count_events([tried(0.0, 1000.0), tried(0.0, None)]) == 1
    assert count_events([tried(0.0, 1000.0), tried(1100.0, None)]) == 2


def test_recent_preemptions_and_returns_to_spot_count_events_in_a_gangs_history():
    history = (
        *[tried(0.0, 1000.0) for _ in range(3)],
        *[tried(1100.0, 5000.0, "migrated", "on-demand") for _ in range(3)],
        *[tried(4900.0, 6000.0) for _ in range(3)],
    )
    assert recent_preemptions(history, now=6100.0, window=HOUR) == 1  # the first is out of the window
    assert recent_preemptions(history, now=6100.0, window=2 * HOUR) == 2
    assert returns_to_spot(history) == 1


def ctx(history, nodes=3):
    return PlacementContext(
        job_id=1, now=1100.0, zones=("z", "y"), use_spot=True, fallback="on-demand", submitted_at=0.0,
        preemptions_before_fallback=3, fallback_window=HOUR, history=tuple(history), nodes=nodes,
    )


def test_a_gang_taken_back_once_goes_back_to_spot_and_falls_back_after_three_times():
    once = [tried(0.0, 1000.0) for _ in range(3)]
    assert DefaultPolicy().place(ctx(once)).market == "spot"
    thrice = [tried(start, start + 100.0) for start in (0.0, 300.0, 600.0) for _ in range(3)]
    assert DefaultPolicy().place(ctx(thrice)).market == "on-demand"
