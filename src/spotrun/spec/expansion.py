"""What a job file holds once YAML has expanded it: refused when it is larger than any job file may be, or when a
text in it holds a NUL character.

YAML aliases repeat their anchor's value: a 0.5 MB job file whose 100 `env` entries alias one 0.5 MB text was
stored as a 50 MB spec, read again by every job listing and every controller tick. A NUL is valid in YAML's
double-quoted text but not in a path, a command or an environment variable; it was stored and failed on the
instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from spotrun.spec.errors import Problem
from spotrun.spec.yaml_source import field_path

MAX_SPEC_CHARS = 1_000_000  # a job file's text, and what it expands to


def too_large(data: Any) -> Problem | None:
    """A problem when `data`, its aliases expanded, holds more than MAX_SPEC_CHARS characters (each value, key and
    container counting one at least, so that nested aliases of empty lists count too); it stops counting there."""
    size = 0
    for _, text in _texts(data, ()):
        size += max(len(text), 1)
        if size > MAX_SPEC_CHARS:
            return Problem("", f"expands to more than {MAX_SPEC_CHARS:,} characters (YAML aliases repeat their "
                               "anchor's text); a job file may hold at most that many", None)
    return None


def nul_problems(data: Any, line_of: Callable[[Sequence[str | int]], int | None]) -> list[Problem]:
    """A problem for each value or key holding a NUL character, on its line (call it on data not `too_large`)."""
    return [
        Problem(field_path(path), "holds a NUL character (\\0), which no path, command or environment variable can "
                                  "hold", line_of(path))
        for path, text in _texts(data, ()) if "\0" in text
    ]


def _texts(data: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every key and scalar of `data` as text, with the path it is at (containers as ""); a shared (aliased) value
    once per use."""
    if isinstance(data, dict):
        yield path, ""
        for key, value in data.items():
            yield path, str(key)
            yield from _texts(value, (*path, str(key)))
    elif isinstance(data, list):
        yield path, ""
        for index, item in enumerate(data):
            yield from _texts(item, (*path, index))
    else:
        yield path, str(data)
