"""The on-disk (and in-store) checkpoint format, shared by the SDK that writes it and the agent that backs it up.

A checkpoint is a folder ``ckpt-<step:012d>/`` with payload files and ``manifest.json`` written last.
The manifest lists every payload file with its size and SHA-256; a folder without a readable manifest
is not a checkpoint (it is a save that died half-way).
"""

from __future__ import annotations

import hashlib
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


def list_candidates(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    """(step, path) of every ckpt-* folder under root holding a manifest file, readable or not, oldest first:
    what restore must either use or report. A folder without one is a save that died half-way."""
    try:
        entries = fs.ls(root, detail=False)
    except (FileNotFoundError, OSError):
        return []
    found = []
    for path in entries:
        step = parse_step(path)
        if step is not None and _is_file(fs, f"{path.rstrip('/')}/{MANIFEST_NAME}"):
            found.append((step, path))
    return sorted(found)


def _is_file(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    try:
        return bool(fs.isfile(path))
    except OSError:
        return False


MANIFEST_FORMAT = 1


class CorruptCheckpoint(Exception):
    """A committed checkpoint whose files do not match its manifest."""


def build_manifest(step: int, files: dict[str, bytes | dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The manifest of a checkpoint: for each payload file its size and SHA-256.

    ``files`` maps a file name to its bytes, or to an already computed ``{"size", "sha256"}`` entry.
    """
    entries = {name: data if isinstance(data, dict) else describe_bytes(data) for name, data in files.items()}
    return {"format": MANIFEST_FORMAT, "step": step, "files": dict(sorted(entries.items())), **extra}


def describe_bytes(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def encode_manifest(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def read_verified(
    fs: fsspec.AbstractFileSystem, checkpoint_path: str, names: list[str] | None = None
) -> dict[str, bytes]:
    """The payload files of a committed checkpoint (all, or those named), each checked against the manifest.

    Raises CorruptCheckpoint naming the first file that is missing, unlisted, or differs in size or SHA-256.
    """
    contents = {}
    for name, entry in manifest_entries(fs, checkpoint_path, names):
        try:
            data = bytes(fs.cat_file(f"{checkpoint_path.rstrip('/')}/{name}"))
        except (FileNotFoundError, OSError) as error:
            raise unreadable(checkpoint_path, name, error) from error
        check_entry(checkpoint_path, name, describe_bytes(data), entry)
        contents[name] = data
    return contents


def manifest_entries(
    fs: fsspec.AbstractFileSystem, checkpoint_path: str, names: list[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(name, manifest entry) of the payload files named (default: all); CorruptCheckpoint when the manifest
    is unreadable or does not list one of them."""
    manifest = read_manifest(fs, checkpoint_path)
    if manifest is None:
        raise CorruptCheckpoint(f"{checkpoint_path}: no readable {MANIFEST_NAME}")
    entries = []
    for name in list(manifest["files"]) if names is None else names:
        entry = manifest["files"].get(name)
        if not isinstance(entry, dict):
            raise CorruptCheckpoint(f"{checkpoint_path}: {name} is not listed in the manifest")
        entries.append((name, entry))
    return entries


def check_entry(checkpoint_path: str, name: str, described: dict[str, Any], entry: dict[str, Any]) -> None:
    """CorruptCheckpoint unless ``described`` (see ``describe_bytes``) matches the file's manifest entry."""
    if described != {"size": entry.get("size"), "sha256": entry.get("sha256")}:
        raise CorruptCheckpoint(f"{checkpoint_path}: {name} does not match its size/sha256 in the manifest")


def unreadable(checkpoint_path: str, name: str, error: Exception) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"{checkpoint_path}: {name} cannot be read ({error})")
