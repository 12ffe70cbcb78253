"""`~` and `~user` in paths a user wrote (a job file's workdir and checkpoint store, SPOTRUN_HOME, ...), expanded in
one place: pathlib raises a bare RuntimeError for a user this machine does not have, which reached users as a
traceback (and the API's callers as a 500)."""

from __future__ import annotations

import os
from pathlib import Path


class UnknownUser(ValueError):
    """A path that starts with ~user, for a user this machine does not have (or ~ where no home is known)."""


def expand_user(path: str | os.PathLike[str]) -> Path:
    """`path` with a leading ~ or ~user made that user's home folder; UnknownUser where there is none."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise UnknownUser(_unknown_user(os.fspath(path))) from None


def _unknown_user(path: str) -> str:
    user = path[1:].split("/", 1)[0]
    if not user:
        return f"{path!r} starts with ~, but this machine knows no home folder for the current user"
    return f"{path!r} starts with ~{user}, but this machine has no user {user!r}"
