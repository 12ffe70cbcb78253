import math

import pytest

from spotrun.spec import parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (2.5, 2.5),
        ("90", 90.0),
        ("1.5", 1.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1d", 86400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("1d2h3m4s500ms", 86400 + 7200 + 180 + 4.5),
        ("2H", 7200.0),
        ("  45s ", 45.0),
        ("0s", 0.0),
    ],
)
def test_parses_durations(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "expected_in_message"),
    [
        ("abc", "must be a duration like 90s, 10m, 2h"),
        ("", "must be a duration"),
        ("10x", "got '10x'"),
        ("m", "must be a duration"),
        ("1m1h", "must be a duration"),  # units out of order
        ("1h1h", "must be a duration"),  # a unit twice
        ("1.h", "must be a duration"),
        ("-5", "must not be negative"),
        ("-5m", "must not be negative"),
        (-1, "must not be negative; got -1"),
        (-0.5, "must not be negative"),
        (math.inf, "must be a finite duration"),
        (math.nan, "must be a finite duration"),
        (True, "got true"),
        (None, "got null"),
        ([1], "got a list"),
        ({"h": 1}, "got a mapping"),
    ],
)
def test_rejects_bad_durations_with_a_clear_message(value, expected_in_message):
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert expected_in_message in str(caught.value)
