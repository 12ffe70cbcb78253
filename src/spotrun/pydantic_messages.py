"""pydantic's words for a validation error, as spotrun shows them: without the prefix pydantic puts before a
validator's own message ("Value error, must be a URL ..."), which reads as a leak of the library in a refusal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# pydantic's error types whose message is a validator's words after a prefix of pydantic's
_PREFIXES = {"value_error": "Value error, ", "assertion_error": "Assertion failed, "}


def error_message(error: Mapping[str, Any]) -> str:
    """The message of one error of `ValidationError.errors()`, without pydantic's prefix."""
    message = str(error["msg"])
    return message.removeprefix(_PREFIXES.get(error["type"], ""))
