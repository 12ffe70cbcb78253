"""Spot availability traces: loading, validating and replaying them.

A trace file is JSON ``{"metadata": {"gap_seconds": 600}, "data": [1, 0, ...]}``: one sample every
``gap_seconds``; a sample counts how many instances could be had in that interval (``0`` = none).
The files come from skypilot-org/spot-traces (the NSDI'24 "Can't Be Late" paper); see
``/work/shared/traces/README.md`` for what each folder means.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from spotrun.user_paths import UnknownUser, expand_user

TRACES_DIR_ENV = "SPOTRUN_TRACES_DIR"

# The bundled traces (src/spotrun/data/traces/) and the local zone each one plays.
BUNDLED_ZONE_TRACES = {
    "local-a": "aws-10-26-2022_us-west-2a_v100_1.json",
    "local-b": "aws-10-26-2022_us-west-2b_v100_1.json",
    "local-c": "aws-10-26-2022_us-west-2a_v100_8.json",
}
MAX_GAP_SECONDS = 365 * 86400.0
MAX_SAMPLE = 2**31 - 1  # instances at once: more than any market holds, and an int64 holds it
MAX_TRACE_CHARS = 64_000_000  # a trace file's text: a year of one-minute samples is about 1 MB


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True, eq=False)
class Trace:
    """One zone's availability over time; replay loops back to the start after the last sample."""

    gap_seconds: float
    data: np.ndarray  # int64 samples, >= 0
    source: Path | None = None

    def __len__(self) -> int:
        return len(self.data)

    @property
    def duration_seconds(self) -> float:
        return self.gap_seconds * len(self.data)

    def sample_index(self, t_seconds: float) -> int:
        """Index of the sample current at `t_seconds` after the trace's start (looping)."""
        return math.floor(t_seconds / self.gap_seconds) % len(self.data)

    def value(self, t_seconds: float) -> int:
        return int(self.data[self.sample_index(t_seconds)])

    def available(self, t_seconds: float, nodes: int = 1) -> bool:
        """Whether `nodes` instances could be had `t_seconds` after the trace's start (looping)."""
        return self.value(t_seconds) >= nodes

    def preemption_indices(self, nodes: int = 1) -> np.ndarray:
        """Indices i where sample i-1 was available and sample i is not (a running instance is lost at i)."""
        up = self.data >= nodes
        return np.flatnonzero(up[:-1] & ~up[1:]) + 1

    def availability(self, nodes: int = 1) -> float:
        """Fraction of samples with capacity."""
        return float(np.mean(self.data >= nodes))


def parse_trace(document: Any, source: Path | None = None) -> Trace:
    """Validate a decoded trace document; errors name the source and the offending key or sample."""
    where = str(source) if source is not None else "trace"
    if not isinstance(document, dict):
        raise TraceError(f"{where}: expected a JSON object with 'metadata' and 'data', got {type(document).__name__}")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or "gap_seconds" not in metadata:
        raise TraceError(f"{where}: missing 'metadata.gap_seconds'")
    gap = metadata["gap_seconds"]
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 < gap <= MAX_GAP_SECONDS:
        raise TraceError(f"{where}: 'metadata.gap_seconds' must be a positive number of seconds up to a year, "
                         f"got {_shown(gap)}")
    if "data" not in document:
        raise TraceError(f"{where}: missing 'data'")
    samples = document["data"]
    if not isinstance(samples, list):
        raise TraceError(f"{where}: 'data' must be a list of sample counts, got {type(samples).__name__}")
    if not samples:
        raise TraceError(f"{where}: 'data' is empty")
    return Trace(gap_seconds=float(gap), data=_validated_samples(samples, where), source=source)


def _validated_samples(samples: list[Any], where: str) -> np.ndarray:
    for index, sample in enumerate(samples):
        numeric = isinstance(sample, (int, float)) and not isinstance(sample, bool)
        if not numeric or not 0 <= sample <= MAX_SAMPLE or sample != int(sample):
            raise TraceError(f"{where}: data[{index}] must be a whole number of instances from 0 to {MAX_SAMPLE:,}, "
                             f"got {_shown(sample)}")
    return np.asarray(samples, dtype=np.int64)


def _shown(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {round(value.bit_length() * 0.30103)} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and validate one trace file."""
    source = Path(path)
    try:
        with source.open(encoding="utf-8") as fh:
            text = fh.read(MAX_TRACE_CHARS + 1)  # no more: `--trace /dev/zero` read until memory ran out
    except FileNotFoundError:
        raise TraceError(f"{source}: no such trace file") from None
    except UnicodeDecodeError as error:
        raise TraceError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise TraceError(f"{source}: cannot be read: {error.strerror or error}") from None
    if len(text) > MAX_TRACE_CHARS:
        raise TraceError(f"{source}: holds more than {MAX_TRACE_CHARS:,} characters; a trace file may hold at most "
                         "that many")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise TraceError(f"{source}: not valid JSON ({error})") from None
    except RecursionError:
        raise TraceError(f"{source}: not a trace: nested too deeply") from None
    except ValueError as error:  # an integer of more digits than Python reads (4,300)
        raise TraceError(f"{source}: not valid JSON ({error})") from None
    return parse_trace(document, source)


def shared_traces_dir() -> Path:
    """$SPOTRUN_TRACES_DIR, else the nearest ``shared/traces`` beside an ancestor of this checkout."""
    configured = os.environ.get(TRACES_DIR_ENV)
    if configured:
        try:
            path = expand_user(configured)
        except UnknownUser as unknown:
            raise FileNotFoundError(f"${TRACES_DIR_ENV}: {unknown}") from None
        if not path.is_dir():
            raise FileNotFoundError(f"${TRACES_DIR_ENV} points to {path}, which is not a folder")
        return path
    for ancestor in Path(__file__).resolve().parents:
        candidate = ancestor / "shared" / "traces"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no shared/traces folder found above {Path(__file__).parent}; set ${TRACES_DIR_ENV}")


def bundled_traces_dir() -> Path:
    """The traces shipped inside the package (src/spotrun/data/traces/)."""
    return Path(str(resources.files("spotrun") / "data" / "traces"))


def list_traces(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Every ``*.json`` trace under `directory` (default: the bundled ones), sorted."""
    root = Path(directory) if directory is not None else bundled_traces_dir()
    if not root.is_dir():
        raise FileNotFoundError(f"trace folder {root} does not exist")
    return sorted(root.rglob("*.json"))


def bundled_zone_traces() -> dict[str, Path]:
    """The bundled trace file each local zone replays (local-a, local-b, local-c)."""
    root = bundled_traces_dir()
    return {zone: root / name for zone, name in BUNDLED_ZONE_TRACES.items()}
