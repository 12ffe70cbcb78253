"""Job file text -> JobSpec, or a SpecError listing every problem with its field and line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from spotrun.spec.errors import Problem, SpecError
from spotrun.spec.expansion import MAX_SPEC_CHARS, nul_problems, too_large
from spotrun.spec.messages import reword
from spotrun.spec.models import JobSpec
from spotrun.spec.values import describe
from spotrun.spec.yaml_source import YamlSource, field_path, read_yaml


def load_spec(path: str | os.PathLike[str]) -> JobSpec:
    """Read and validate the job file at `path`; the job is named after the file's stem unless it says `name:`."""
    return load_job_file(path)[0]


def load_job_file(path: str | os.PathLike[str]) -> tuple[JobSpec, str]:
    """`load_spec`'s spec and the text it was read from, for `located` to place the problems checks after parsing find.
    The file is read once: a named pipe (`spotrun launch <(...)`) gives its text to one reader, and a second read of it
    waited forever."""
    text = _read_job_file(path)
    return parse_spec(text, source=str(path), default_name=Path(path).stem), text


def _read_job_file(path: str | os.PathLike[str]) -> str:
    """The text of the job file at `path`; a SpecError where it cannot be read, or is too long to be a job file."""
    source = str(path)
    try:
        with Path(path).open(encoding="utf-8") as fh:
            text = fh.read(MAX_SPEC_CHARS + 1)  # no more: `spotrun launch /dev/zero` read until memory ran out
    except FileNotFoundError:
        raise SpecError(source, [Problem("", "no such file")]) from None
    except IsADirectoryError:
        raise SpecError(source, [Problem("", "is a folder, not a job file")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(source, [Problem("", f"is not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    except OSError as exc:
        raise SpecError(source, [Problem("", f"cannot be read: {exc.strerror or exc}")]) from None
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(source, [Problem("", f"holds more than {MAX_SPEC_CHARS:,} characters; a job file may hold at "
                                             "most that many")])
    return text


def parse_spec(text: str, source: str = "<string>", default_name: str | None = None) -> JobSpec:
    """Validate job-file text; `source` names it in error messages, `default_name` is used when it has no `name:`."""
    document = read_yaml(text, source)
    _require_mapping(document, source)
    data = document.env_as_written()
    if (oversized := too_large(data)) is not None:
        raise SpecError(source, [oversized])
    problems = document.duplicate_keys() + nul_problems(data, document.line_of)
    if keys_not_text := document.keys_not_text():  # pydantic would report each again, in Python's words
        raise SpecError(source, _in_file_order(problems + keys_not_text))
    named_by_default = default_name is not None and "name" not in data
    if named_by_default:
        data = {**data, "name": default_name}
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        problems += [_problem(error, document) for error in exc.errors()]
    if named_by_default:
        problems = [_explain_default_name(problem, default_name) for problem in problems]
    if problems:
        raise SpecError(source, _in_file_order(problems))
    return spec


def located(error: SpecError, text: str) -> SpecError:
    """``error`` (checks made after parsing: the cloud, the policy, the deadline, ...) with each problem that has a
    field and no line given the line of that field in the job file's ``text``, in file order."""
    try:
        document = read_yaml(text, error.source)
    except (SpecError, yaml.YAMLError):
        return error
    problems = [
        Problem(problem.field, problem.message, document.line_of(_parts(problem.field)))
        if problem.line is None and problem.field else problem
        for problem in error.problems
    ]
    return SpecError(error.source, _in_file_order(problems), heading=error.heading)


def _parts(field: str) -> list[str | int]:
    """"spot.zones[1]" -> ["spot", "zones", 1] (``field_path`` the other way)."""
    parts: list[str | int] = []
    for name in field.split("."):
        key, *indexes = re.split(r"\[(\d+)\]", name)
        parts += [key, *(int(index) for index in indexes if index)]
    return parts


def _require_mapping(document: YamlSource, source: str) -> None:
    if document.root is None:
        raise SpecError(source, [Problem("", "the file is empty; a job needs at least `run: <command>`")])
    if not isinstance(document.data, dict):
        line = document.root.start_mark.line + 1
        message = f"the top level must be a mapping of fields like `run: train.py`; got {describe(document.data)}"
        raise SpecError(source, [Problem("", message, line)])


def _problem(error: ErrorDetails, document: YamlSource) -> Problem:
    return Problem(field_path(error["loc"]), reword(error, JobSpec), document.line_of(error["loc"]))


def _explain_default_name(problem: Problem, default_name: str | None) -> Problem:
    if problem.field != "name":
        return problem
    message = f"the file name gives the job the name {default_name!r}, which is not valid; add `name:` to the file"
    return Problem(problem.field, message, problem.line)


def _in_file_order(problems: list[Problem]) -> list[Problem]:
    # Problems without a line (a missing top-level field) go last; the sort is stable within a line.
    return sorted(problems, key=lambda problem: (problem.line is None, problem.line or 0))
