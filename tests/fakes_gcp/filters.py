"""The few Compute list filter expressions the fake understands; any other is refused as GCE refuses bad ones.

Supported: `FIELD = "VALUE"`, `FIELD != "VALUE"` (quotes optional) and `FIELD:*` (FIELD is present), where
FIELD is a dotted path into the resource's JSON, e.g. `labels.spotrun-token`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_COMPARISON = re.compile(r'^\s*([A-Za-z][\w.-]*)\s*(=|!=)\s*(?:"([^"]*)"|([^\s"]+))\s*$')
_PRESENCE = re.compile(r"^\s*([A-Za-z][\w.-]*)\s*:\s*\*\s*$")


class InvalidFilter(ValueError):
    pass


def compile_filter(expression: str | None) -> Callable[[dict[str, Any]], bool]:
    if not expression:
        return lambda resource: True
    presence = _PRESENCE.match(expression)
    if presence:
        path = presence.group(1)
        return lambda resource: _lookup(resource, path) is not None
    comparison = _COMPARISON.match(expression)
    if comparison:
        path, operator, quoted, bare = comparison.groups()
        wanted = quoted if quoted is not None else bare
        if operator == "=":
            return lambda resource: _text(_lookup(resource, path)) == wanted
        return lambda resource: _text(_lookup(resource, path)) != wanted
    raise InvalidFilter(f"Invalid value for field 'filter': '{expression}'. Invalid list filter expression.")


def _lookup(resource: dict[str, Any], path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
