"""The on-disk (and in-store) checkpoint format, shared by the SDK that writes it and the agent that backs it up.

A checkpoint is a folder ``ckpt-<step:012d>/`` with payload files and ``manifest.json`` written last.
The manifest lists every payload file with its size and SHA-256; a folder without a readable manifest
is not a checkpoint (it is a save that died half-way).
"""

from __future__ import annotations

import json
import re
from typing import Any

import fsspec

CHECKPOINT_PREFIX = "ckpt-"
MANIFEST_NAME = "manifest.json"
_NAME = re.compile(r"^ckpt-(\d{12})$")


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step:012d}"


def parse_step(name: str) -> int | None:
    match = _NAME.match(name.rstrip("/").rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def read_manifest(fs: fsspec.AbstractFileSystem, checkpoint_path: str) -> dict[str, Any] | None:
    """The manifest of a checkpoint folder, or None when it is missing or unreadable."""
    try:
        with fs.open(f"{checkpoint_path.rstrip('/')}/{MANIFEST_NAME}", "rb") as fh:
            manifest = json.loads(fh.read())
    except (FileNotFoundError, OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def list_committed(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    """(step, path) of every folder under root that has a manifest, oldest first (checksums not verified)."""
    try:
        entries = fs.ls(root, detail=False)
    except (FileNotFoundError, OSError):
        return []
    found = []
    for path in entries:
        step = parse_step(path)
        if step is not None and read_manifest(fs, path) is not None:
            found.append((step, path))
    return sorted(found)
