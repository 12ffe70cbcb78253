"""Job file paths as the commands take them (`spotrun launch JOB_FILE`, `spotrun simulate --job`). An empty one is a
bad argument saying so: as a Path it is ".", which was refused as "is a folder, not a job file"."""

from __future__ import annotations

from pathlib import Path

import typer


def job_file_path(text: str) -> Path:
    """The parser of every job file argument and option."""
    if not text:
        raise typer.BadParameter("the job file path is empty: give the job's YAML file")
    return Path(text)
