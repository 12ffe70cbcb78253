"""Text the store keeps: PostgreSQL's text holds no NUL character (SQLite's does), so a request carrying one in such
a field is refused 422 on every store alike, not a 500 on one of them. A log chunk's text is kept as bytes, NULs and
all, and is not this type."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def _without_nul(text: str) -> str:
    if "\0" in text:
        raise ValueError("holds a NUL character (\\0), which no text the store keeps can hold")
    return text


StoredText = Annotated[str, AfterValidator(_without_nul)]
