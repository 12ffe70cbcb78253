"""How reasons and events word counts, alike wherever they are written."""

from __future__ import annotations


def times(count: int) -> str:
    """How often something happened: "once", else "N times" ("2 times", "0 times")."""
    return "once" if count == 1 else f"{count} times"
