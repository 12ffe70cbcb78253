"""How a value the user wrote is quoted back in an error message, in YAML's words rather than Python's."""

from __future__ import annotations

from datetime import date, datetime

_MAX_TEXT = 60


def describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= _MAX_TEXT else value[: _MAX_TEXT - 3] + "..."
        return repr(shown)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, int) and value.bit_length() > 200:  # Python writes at most 4,300 digits
        return f"a number of about {round(value.bit_length() * 0.30103)} digits"
    return str(value)
