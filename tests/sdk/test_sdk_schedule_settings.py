"""The save schedule's settings (every_steps, every_seconds, keep_last), as the Checkpointer and the framework
callbacks check them: a value of the wrong type, such as an environment variable's text passed on as it is, was
compared with a number (a TypeError naming no setting) or taken (2.5 steps); NaN seconds were taken."""

from __future__ import annotations

import numpy as np
import pytest

from spotrun.sdk.schedule import check_schedule


@pytest.mark.parametrize("settings, error, named", [
    ({"every_seconds": "10"}, TypeError, "every_seconds must be a number of seconds"),
    ({"every_seconds": True}, TypeError, "every_seconds must be a number of seconds"),
    ({"every_seconds": float("nan")}, ValueError, "every_seconds must be positive"),
    ({"every_seconds": 0}, ValueError, "every_seconds must be positive"),
    ({"every_steps": 2.5}, TypeError, "every_steps must be a whole number"),
    ({"every_steps": "100"}, TypeError, "every_steps must be a whole number"),
    ({"every_steps": 0}, ValueError, "every_steps must be at least 1"),
    ({"keep_last": 1.0}, TypeError, "keep_last must be a whole number"),
    ({"keep_last": 0}, ValueError, "keep_last must be at least 1"),
])
def test_a_setting_that_cannot_be_kept_is_refused_by_name(settings, error, named):
    with pytest.raises(error, match=named):
        check_schedule(**{"every_seconds": None, "keep_last": None, **settings})


def test_whole_numbers_of_numpy_and_plain_numbers_are_taken():
    check_schedule(every_seconds=np.float32(0.5), keep_last=np.int64(3), every_steps=np.int32(10))
    check_schedule(every_seconds=30, keep_last=None, every_steps=None)


def test_the_checkpointer_checks_them(tmp_path):
    """(The framework callbacks call the same check: test_sdk_lightning.py's test_bad_settings_are_refused.)"""
    import spotrun

    with pytest.raises(TypeError, match="every_seconds"):
        spotrun.Checkpointer(tmp_path, signals=(), every_seconds="10")
