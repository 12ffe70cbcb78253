"""What a job file holds once YAML has expanded it: refused when it is larger than any job file may be, or when a
text in it holds a NUL character.

YAML aliases repeat their anchor's value: a 0.5 MB job file whose 100 `env` entries alias one 0.5 MB text was
stored as a 50 MB spec, read again by every job listing and every controller tick. The size of an aliased list or
mapping is counted once and added at each use: counted use by use, a 300-byte file of lists nested 7 deep, each of
ten aliases of the one below, took 5 s of the server's time to refuse (a million uses, one by one). A NUL is valid
in YAML's double-quoted text but not in a path, a command or an environment variable; it was stored and failed on
the instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from spotrun.spec.errors import Problem
from spotrun.spec.yaml_source import field_path

MAX_SPEC_CHARS = 1_000_000  # a job file's text, and what it expands to


class _Unreadable(Exception):
    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message


class _TooLarge(Exception):
    pass


def too_large(data: Any) -> Problem | None:
    """A problem when `data`, its aliases expanded, holds more than MAX_SPEC_CHARS characters (each value, key and
    container counting one at least, so that nested aliases of empty lists count too); it stops counting there. Also
    when it cannot be read as text at all: a YAML alias inside its own anchor, or a number too long to write."""
    try:
        _size(data, (), {}, frozenset(), 0)
    except _TooLarge:
        return Problem("", f"expands to more than {MAX_SPEC_CHARS:,} characters (YAML aliases repeat their "
                           "anchor's text); a job file may hold at most that many", None)
    except _Unreadable as unreadable:
        return Problem(field_path(unreadable.path), unreadable.message, None)
    return None


def _size(data: Any, path: tuple[str | int, ...], sizes: dict[int, int], inside: frozenset[int], before: int) -> int:
    """The characters `data` counts for, as `_texts` yields them; `sizes`: those of the containers already counted
    (by id: an alias is the same object), `before`: the count so far, for _TooLarge as soon as it passes the limit."""
    if not isinstance(data, dict | list):
        size = max(len(_text(data, path)), 1)
    elif id(data) in sizes:
        size = sizes[id(data)]
    else:
        if id(data) in inside:
            raise _Unreadable(path, "refers to itself (a YAML alias inside its own anchor)")
        inside = inside | {id(data)}
        size = 1
        items = data.items() if isinstance(data, dict) else enumerate(data)
        for key, value in items:
            if isinstance(data, dict):
                size += max(len(_text(key, path)), 1)
                if before + size > MAX_SPEC_CHARS:
                    raise _TooLarge
            at = (*path, str(key) if isinstance(data, dict) else key)
            size += _size(value, at, sizes, inside, before + size)  # raises itself once past the limit
        sizes[id(data)] = size
    if before + size > MAX_SPEC_CHARS:
        raise _TooLarge
    return size


def nul_problems(data: Any, line_of: Callable[[Sequence[str | int]], int | None]) -> list[Problem]:
    """A problem for each value or key holding a NUL character or a lone UTF-16 surrogate (YAML's "\\ud800"), on
    its line (call it on data not `too_large`)."""
    return [
        Problem(field_path(path), problem, line_of(path))
        for path, text in _texts(data, ()) if (problem := _not_text(text)) is not None
    ]


def _not_text(text: str) -> str | None:
    if "\0" in text:
        return "holds a NUL character (\\0), which no path, command or environment variable can hold"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (f"holds an unpaired surrogate ({text[error.start]!r}), which is not text: no file, command or "
                "environment variable can hold it")
    return None


def _texts(
    data: Any, path: tuple[str | int, ...], inside: frozenset[int] = frozenset()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every key and scalar of `data` as text, with the path it is at (containers as ""); a shared (aliased) value
    once per use. `inside`: the containers this one is in, so that an alias inside its own anchor is refused."""
    if isinstance(data, dict | list):
        if id(data) in inside:
            raise _Unreadable(path, "refers to itself (a YAML alias inside its own anchor)")
        inside = inside | {id(data)}
        yield path, ""
        items = data.items() if isinstance(data, dict) else enumerate(data)
        for key, value in items:
            if isinstance(data, dict):
                yield path, _text(key, path)
            yield from _texts(value, (*path, str(key) if isinstance(data, dict) else key), inside)
    else:
        yield path, _text(data, path)


def _text(value: Any, path: tuple[str | int, ...]) -> str:
    try:
        return str(value)
    except ValueError:  # an integer of more digits than Python writes (4,300)
        raise _Unreadable(path, "is a number too long to be any setting's value") from None
