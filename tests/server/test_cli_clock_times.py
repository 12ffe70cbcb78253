"""The CLI writes a moment of today as its wall-clock time, and an older one (or a later day's) with its date: a job
listing read a day after was ambiguous, "23:10:04" yesterday's or today's."""

from __future__ import annotations

import io
import time
from datetime import datetime, timedelta

from rich.console import Console

from spotrun.api_models import AttemptView
from spotrun.cli.formats import clock_time
from spotrun.cli.refusals import RefusedTries
from spotrun.cli.views import attempts_table

NOW = datetime(2026, 11, 29, 9, 30, 0).timestamp()  # local time, as the CLI writes it


def at(days_ago: float, hour: int, minute: int = 0, second: int = 0) -> float:
    day = datetime.fromtimestamp(NOW) - timedelta(days=days_ago)
    return day.replace(hour=hour, minute=minute, second=second).timestamp()


def test_a_moment_of_today_is_its_time_alone() -> None:
    assert clock_time(at(0, 0, 0, 1), NOW) == "00:00:01"
    assert clock_time(at(0, 9, 15, 42), NOW) == "09:15:42"


def test_a_moment_of_another_day_has_its_date() -> None:
    assert clock_time(at(1, 23, 59, 59), NOW) == "2026-11-28 23:59:59"
    assert clock_time(at(400, 8), NOW) == "2025-10-25 08:00:00"
    assert clock_time(at(-1, 8), NOW) == "2026-11-30 08:00:00"  # a clock set wrong, or a machine ahead


def test_no_moment_is_a_dash() -> None:
    assert clock_time(None, NOW) == "—"


def test_the_clock_is_now_by_default() -> None:
    now = time.time()
    assert clock_time(now - 3 * 86400) == datetime.fromtimestamp(now - 3 * 86400).strftime("%Y-%m-%d %H:%M:%S")


def attempt(
    number: int, started_at: float, ended_at: float | None, end_reason: str | None = "preempted",
) -> AttemptView:
    return AttemptView(
        number=number, state="ended" if ended_at else "running", provider="local", market="spot", zone="local-a",
        instance_type="local.cpu", instance_id=f"i-{number}", created_at=started_at, started_at=started_at,
        agent_started_at=started_at, notice_at=None, ended_at=ended_at, end_reason=end_reason if ended_at else None,
        billed_seconds=0.0, price_per_hour=1.0, on_demand_price_per_hour=3.0, checkpoint_step=None, log_bytes=0,
    )


def rendered(table) -> str:
    out = io.StringIO()
    Console(file=out, width=300).print(table)
    return out.getvalue()


def test_the_attempts_table_dates_the_attempts_of_earlier_days() -> None:
    yesterday, today = at(1, 23, 10, 4), at(0, 8, 2, 3)
    table = rendered(attempts_table([attempt(1, yesterday, today), attempt(2, today, None)], job_id=7, now=NOW))
    assert "2026-11-28 23:10:04" in table
    assert "08:02:03" in table and "2026-11-29 08:02:03" not in table


def test_a_folded_run_of_refused_tries_dates_its_ends_of_earlier_days() -> None:
    now = time.time()
    tries = RefusedTries((attempt(1, now - 2 * 86400, now - 2 * 86400, "no_capacity"),
                          attempt(2, now - 5, now - 5, "no_capacity")))
    assert tries.ended.startswith(datetime.fromtimestamp(now - 2 * 86400).strftime("%Y-%m-%d %H:%M:%S") + "–")
