"""GPU names as a job file writes them ("V100") and as Compute Engine names its accelerator types
("nvidia-tesla-v100"): the launch attaches them by that name, and the prices are looked up by it."""

from __future__ import annotations

from collections.abc import Mapping

ACCELERATOR_TYPES: Mapping[str, str] = {
    "K80": "nvidia-tesla-k80",
    "P4": "nvidia-tesla-p4",
    "P100": "nvidia-tesla-p100",
    "V100": "nvidia-tesla-v100",
    "T4": "nvidia-tesla-t4",
    "A100": "nvidia-tesla-a100",
    "A100-80GB": "nvidia-a100-80gb",
    "L4": "nvidia-l4",
    "H100": "nvidia-h100-80gb",
}


def accelerator_type(name: str) -> str:
    """GCE's accelerator type for a job file's GPU name; a GCE name (nvidia-...) passes unchanged. ValueError, naming
    the known ones, for any other."""
    if name.lower().startswith("nvidia-"):
        return name.lower()
    found = ACCELERATOR_TYPES.get(name.upper())
    if found is None:
        raise ValueError(f"unknown accelerator {name!r}; known: {', '.join(ACCELERATOR_TYPES)} or a GCE type (nvidia-...)")
    return found


def accelerator_types(accelerators: Mapping[str, int]) -> dict[str, int]:
    """GCE's accelerator types and counts for a job file's GPUs, in type order; ValueError for an unknown name."""
    return dict(sorted((accelerator_type(name), count) for name, count in accelerators.items()))


def accelerators_text(accelerators: Mapping[str, int]) -> str:
    """A job file's GPUs as one text, e.g. "nvidia-tesla-t4x2,nvidia-tesla-v100x1": the same GPUs, the same text."""
    return ",".join(f"{name}x{count}" for name, count in accelerator_types(accelerators).items())
