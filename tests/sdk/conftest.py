"""Fixtures of the SDK's tests."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from spotrun.sdk import storage


@pytest.fixture
def kill_between_renames(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it, and the next commit replacing a checkpoint of its step is killed between its two renames, as where
    the filesystem cannot swap two folders at once: the old one in the trash, the new one complete in staging.
    `monkeypatch.undo()` ends it."""

    def arm() -> None:
        monkeypatch.setattr(storage, "_exchange", lambda first, second: False)
        rename = os.rename

        def killed_before_the_second(source: str, target: str) -> None:
            if os.path.basename(source).startswith(storage.STAGING_PREFIX):
                raise OSError("the writer was killed here")
            rename(source, target)

        monkeypatch.setattr(os, "rename", killed_before_the_second)

    return arm
