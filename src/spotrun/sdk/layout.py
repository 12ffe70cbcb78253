"""The on-disk (and in-store) checkpoint format, shared by the SDK that writes it and the agent that backs it up.

A checkpoint is a folder ``ckpt-<step:012d>/`` with payload files and ``manifest.json`` written last.
The manifest lists every payload file with its size and a checksum, keyed by the checksum's algorithm:
``{"size": 123, "xxh3_128": "<hex>"}`` (manifest format 2) or ``{"size": 123, "sha256": "<hex>"}`` (format 1,
still verified). A folder without a readable manifest is not a checkpoint (it is a save that died half-way).
The checksum guards against damage (torn or corrupted files), not against tampering. Besides ``format``, ``step``
and ``files``, a manifest may say ``world_size`` (the ranks that saved), ``total_steps`` (the run's), ``created``
(unix seconds), ``save_seconds`` (how long the save took: the agent weighs it against a preemption notice) and
``payload`` (a framework's own checkpoint: ``transformers-trainer``, ``lightning``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO, Protocol

import fsspec

CHECKPOINT_PREFIX = "ckpt-"
MANIFEST_NAME = "manifest.json"
SHARDS_INDEX_NAME = "shards.idx"  # where each piece of a sharded or spread tensor is (``sdk.sharding``)
SHARED_FILE = "shared.pt"  # the Checkpointer's components every rank loads (``sdk.reading``)
# the manifest's ``payload`` of a framework's own checkpoint, and what it holds (the Checkpointer's have none)
TRAINER_PAYLOAD, LIGHTNING_PAYLOAD = "transformers-trainer", "lightning"
FRAMEWORK_PAYLOADS = {TRAINER_PAYLOAD: "the Trainer's own files", LIGHTNING_PAYLOAD: "lightning.ckpt"}
_GLOB_MAGIC = re.compile(r"[*?\[]")  # what fsspec's rm takes for a pattern
_NAME = re.compile(r"^ckpt-(\d{12}|[1-9]\d{12,})$")  # checkpoint_name: 12 digits, more from 10**12 on


def unloadable(manifest: dict[str, Any]) -> str | None:
    """Why nothing could load the checkpoint this manifest describes, whatever its files hold, or None: the
    Checkpointer reads its shared file, and a framework's files are that framework's to read."""
    payload = manifest.get("payload")
    if payload is None:
        return None if SHARED_FILE in manifest["files"] else f"{SHARED_FILE} is not listed in the manifest"
    if not isinstance(payload, str) or payload not in FRAMEWORK_PAYLOADS:
        return f"its payload {payload!r} is none spotrun knows ({', '.join(FRAMEWORK_PAYLOADS)} or the Checkpointer's)"
    return None if manifest["files"] else "the manifest lists no file"


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step:012d}"


def parse_step(name: str) -> int | None:
    match = _NAME.match(name.rstrip("/").rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def remove_folder(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """``fs.rm(path, recursive=True)``, except that a path with glob characters (``[ ] * ?``, as in a folder named
    ``exp[1]``) is taken as written: fsspec's rm expands them, and removed another folder's files (``exp1``'s) instead
    of this one's."""
    if not _GLOB_MAGIC.search(path):
        fs.rm(path, recursive=True)
        return
    for file in sorted(fs.find(path), reverse=True):  # find lists, it does not glob
        fs.rm_file(file)
    with contextlib.suppress(OSError, NotImplementedError):
        if fs.exists(path):  # a filesystem with folders of its own
            fs.rmdir(path)


def read_manifest(
    fs: fsspec.AbstractFileSystem, checkpoint_path: str, *, io_errors: bool = False
) -> dict[str, Any] | None:
    """The manifest of a checkpoint folder, or None when it is missing or unreadable. ``io_errors``: a read that failed
    in the I/O (EIO, a connection reset) raises its OSError instead, so that a caller may try again rather than take
    the checkpoint for one without a manifest."""
    try:
        with fs.open(f"{checkpoint_path.rstrip('/')}/{MANIFEST_NAME}", "rb") as fh:
            manifest = json.loads(fh.read())
    except (FileNotFoundError, ValueError, RecursionError):  # RecursionError: JSON nested too deep to read
        return None
    except OSError:
        if io_errors:
            raise
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def removed(fs: fsspec.AbstractFileSystem, checkpoint_path: str) -> bool:
    """Whether the checkpoint's manifest is gone: its writer has uncommitted it (pruning removes the manifest first,
    or the whole folder at once), so a read of it that failed met a removal, not damage. A manifest that cannot be
    looked at (no permission, an I/O error) is not taken for gone."""
    manifest = f"{checkpoint_path.rstrip('/')}/{MANIFEST_NAME}"
    fs.invalidate_cache(checkpoint_path)
    try:
        fs.info(manifest)
    except FileNotFoundError:
        return True
    except Exception:  # fsspec's backends raise their own kinds
        return False
    return False


def save_seconds_of(manifest: dict[str, Any]) -> float | None:
    """How long the save of a checkpoint took, as the SDK wrote it into the manifest; None when it did not."""
    seconds = manifest.get("save_seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
        return None
    return float(seconds)


def list_committed(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    """(step, path) of every folder under root that has a manifest, oldest first (checksums not verified). No
    root is no checkpoint; a root that cannot be listed (no permission, an I/O error) raises: taken for an empty
    one, a run would start over from step 0."""
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    found = []
    for path in entries:
        step = parse_step(path)
        if step is not None and read_manifest(fs, path) is not None:
            found.append((step, path))
    return sorted(found)


def list_candidates(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    """(step, path) of every ckpt-* folder under root holding a manifest file, readable or not, oldest first:
    what restore must either use or report. A folder without one is a save that died half-way. A root that cannot
    be listed raises (``list_committed``)."""
    try:
        entries = fs.ls(root, detail=False)
    except FileNotFoundError:
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


MANIFEST_FORMAT = 2
READ_CHUNK = 16 << 20
CHECKSUM = "xxh3_128"  # what new manifests use: about 10 GB/s here, against 0.7 GB/s for SHA-256


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def _xxh3_128() -> Hasher:
    import xxhash  # imported on use: the agent reads manifests without verifying them

    return xxhash.xxh3_128()


CHECKSUMS: dict[str, Callable[[], Hasher]] = {"xxh3_128": _xxh3_128, "sha256": hashlib.sha256}


class CorruptCheckpoint(Exception):
    """A committed checkpoint whose files do not match its manifest."""


class ForeignCheckpoint(CorruptCheckpoint):
    """A framework's checkpoint (the Trainer's, Lightning's), which the Checkpointer's reading cannot load: intact,
    perhaps, but not for it."""


def build_manifest(step: int, files: dict[str, bytes | dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The manifest of a checkpoint: for each payload file its size and checksum.

    ``files`` maps a file name to its bytes, or to an already computed entry (see ``describe_bytes``).
    """
    entries = {name: data if isinstance(data, dict) else describe_bytes(data) for name, data in files.items()}
    return {"format": MANIFEST_FORMAT, "step": step, "files": dict(sorted(entries.items())), **extra}


def describe_bytes(data: bytes, algorithm: str = CHECKSUM) -> dict[str, Any]:
    """The manifest entry of ``data``: ``{"size": ..., algorithm: hex digest}``."""
    hasher = CHECKSUMS[algorithm]()
    hasher.update(data)
    return {"size": len(data), algorithm: hasher.hexdigest()}


def describe_file(fh: BinaryIO, algorithm: str = CHECKSUM) -> dict[str, Any]:
    """The manifest entry of what an open file holds from its position on, read in chunks (nothing kept)."""
    hasher = CHECKSUMS[algorithm]()
    size = 0
    while chunk := fh.read(READ_CHUNK):
        hasher.update(chunk)
        size += len(chunk)
    return {"size": size, algorithm: hasher.hexdigest()}


def checksum_algorithm(checkpoint_path: str, name: str, entry: dict[str, Any]) -> str:
    """The algorithm of the checksum a manifest entry records; CorruptCheckpoint when it records none we know."""
    for algorithm in CHECKSUMS:
        if isinstance(entry.get(algorithm), str):
            return algorithm
    raise CorruptCheckpoint(
        f"{checkpoint_path}: {name} has no checksum in the manifest (expected one of {', '.join(CHECKSUMS)})"
    )


def encode_manifest(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def read_verified(
    fs: fsspec.AbstractFileSystem, checkpoint_path: str, names: list[str] | None = None
) -> dict[str, bytes]:
    """The payload files of a committed checkpoint (all, or those named), each checked against the manifest.

    Raises CorruptCheckpoint naming the first file that is missing, unlisted, or differs in size or checksum.
    """
    contents = {}
    for name, entry in manifest_entries(fs, checkpoint_path, names):
        try:
            data = bytes(fs.cat_file(f"{checkpoint_path.rstrip('/')}/{name}"))
        except (FileNotFoundError, OSError) as error:
            raise unreadable(checkpoint_path, name, error) from error
        check_entry(checkpoint_path, name, describe_bytes(data, checksum_algorithm(checkpoint_path, name, entry)), entry)
        contents[name] = data
    return contents


def verify_files(fs: fsspec.AbstractFileSystem, checkpoint_path: str) -> None:
    """CorruptCheckpoint naming the first file the manifest lists that is missing, outside the folder, or differs
    in size or checksum; the files are streamed, not held in memory (`read_verified` keeps their bytes)."""
    root = checkpoint_path.rstrip("/")
    entries = manifest_entries(fs, root)
    check_inside(root, [name for name, _ in entries])
    for name, entry in entries:
        try:
            with fs.open(f"{root}/{name}", "rb") as fh:
                described = describe_file(fh, checksum_algorithm(root, name, entry))
        except FileNotFoundError:
            raise CorruptCheckpoint(f"{root}: {name} is missing") from None
        except OSError as error:
            raise unreadable(root, name, error) from error
        check_entry(root, name, described, entry)


def check_inside(checkpoint_path: str, names: Iterable[str]) -> None:
    """CorruptCheckpoint naming the first of a manifest's file ``names`` that is outside the checkpoint's folder (an
    absolute path, or one going up with ".."): whoever reads the checkpoint would read another folder's file."""
    for name in names:
        if name.startswith("/") or ".." in name.split("/"):
            raise CorruptCheckpoint(f"{checkpoint_path.rstrip('/')}: {name} is outside the checkpoint")


def manifest_entries(
    fs: fsspec.AbstractFileSystem, checkpoint_path: str, names: list[str] | None = None,
    manifest: dict[str, Any] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """(name, manifest entry) of the payload files named (default: all); CorruptCheckpoint when the manifest
    is unreadable or does not list one of them. ``manifest``: the folder's, already read."""
    manifest = manifest if manifest is not None else read_manifest(fs, checkpoint_path)
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
    if described != {key: entry.get(key) for key in described}:
        raise CorruptCheckpoint(f"{checkpoint_path}: {name} does not match its size/checksum in the manifest")


def unreadable(checkpoint_path: str, name: str, error: Exception) -> CorruptCheckpoint:
    return CorruptCheckpoint(f"{checkpoint_path}: {name} cannot be read ({error})")
