"""The job description: a YAML file validated into a JobSpec, with errors that name the field and line."""

from spotrun.spec.durations import parse_duration
from spotrun.spec.errors import Problem, SpecError
from spotrun.spec.loader import load_job_file, load_spec, located, parse_spec
from spotrun.spec.models import CheckpointSpec, JobSpec, NotifySpec, Prices, Resources, SpotSpec

__all__ = [
    "CheckpointSpec",
    "JobSpec",
    "NotifySpec",
    "Prices",
    "Problem",
    "Resources",
    "SpecError",
    "SpotSpec",
    "load_job_file",
    "load_spec",
    "located",
    "parse_duration",
    "parse_spec",
]
