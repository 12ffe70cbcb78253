"""Where spotrun keeps its things: SPOTRUN_HOME, the database URL, the default checkpoint store."""

from __future__ import annotations

import os
from pathlib import Path

from spotrun.user_paths import UnknownUser, expand_user


MIN_TICK_SECONDS = 0.01  # the controller's tick interval at least: 0 or less would spin it on a core
MAX_TICK_SECONDS = 3600.0  # and at most: heartbeats time out in seconds, and a wait past threading's limit fails


class InvalidSetting(ValueError):
    """A SPOTRUN_* variable holds a value its setting cannot take (the message names both, and what is allowed)."""


def home() -> Path:
    """$SPOTRUN_HOME, or ~/.spotrun; created on first use."""
    try:
        path = expand_user(os.environ.get("SPOTRUN_HOME") or "~/.spotrun").resolve()
    except UnknownUser as unknown:
        raise InvalidSetting(f"SPOTRUN_HOME: {unknown}") from None
    path.mkdir(parents=True, exist_ok=True)
    return path


DATABASE_URL_VAR = "SPOTRUN_DATABASE_URL"


def database_url() -> str:
    """$SPOTRUN_DATABASE_URL (e.g. postgresql+psycopg://host/db), else SQLite at $SPOTRUN_HOME/state.db."""
    return os.environ.get(DATABASE_URL_VAR) or f"sqlite:///{home() / 'state.db'}"


def default_checkpoint_store(job_id: int, job_name: str) -> str:
    return (home() / "checkpoints" / f"{job_id}-{job_name}").as_uri()


def logs_dir() -> Path:
    path = home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path
