"""What a checkpoint store's folders hold, read through fsspec, for `spotrun checkpoints`: apart from the commands,
which every start of `spotrun` loads, as fsspec and the SDK's layout take a while to import."""

from __future__ import annotations

from typing import Any

import fsspec
from rich.markup import escape

from spotrun.cli.failing import BAD_ARGUMENT, FAILED
from spotrun.cli.failing import fail as _fail
from spotrun.cli.formats import MAX_FILE_BYTES, byte_size
from spotrun.sdk import layout
from spotrun.sdk.locations import url_to_fs


def reach(where: str, *, given: bool) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and folder of ``where``; a clear error when it names no filesystem, cannot be reached (no
    credentials, no such bucket, ...) or is no folder. A location the user ``given`` that is no folder is a bad
    argument (exit 2, as a job file that is none is to `launch`); a job's store on record that is none is not."""
    try:
        fs, root = url_to_fs(where)
        exists = fs.isdir(root)
        a_file = not exists and fs.isfile(root)
    except Exception as error:  # fsspec and its backends raise their own kinds (ValueError, botocore's, ...)
        raise _fail(f"{where}: cannot be read: {why(error)}") from None
    if not exists:
        what = "is a file, not a checkpoint folder" if a_file else "no such checkpoint folder"
        raise _fail(f"{where}: {what}", BAD_ARGUMENT if given else FAILED)
    return fs, root


LOOKED_BELOW = 20  # folders of a folder without checkpoints looked into, at most (a bucket may hold thousands)


def held_below(fs: fsspec.AbstractFileSystem, root: str) -> str:
    """Where one level down checkpoints are, as a hint (`SPOTRUN_HOME/checkpoints` holds a folder per job), or ""."""
    try:
        below = [entry["name"] for entry in fs.ls(root, detail=True) if entry.get("type") == "directory"]
        holding = [folder for folder in sorted(below)[:LOOKED_BELOW] if folders(fs, folder)]
    except Exception:  # only a hint: the listing itself answered
        return ""
    if not holding:
        return ""
    names = ", ".join(escape(folder.rstrip("/").rsplit("/", 1)[-1]) for folder in holding[:5])
    more = f" and {len(holding) - 5} more" if len(holding) > 5 else ""
    return f"; folders in it hold some: {names}{more} (list one of them, or give --job ID)"


def why(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def folders(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    fs.invalidate_cache(root)
    return sorted((step, path) for path in fs.ls(root, detail=False) if (step := layout.parse_step(path)) is not None)


PRUNED = "pruned meanwhile (removed by its writer while read)"  # its writer's keep_last, not damage


def describe(fs: fsspec.AbstractFileSystem, path: str, step: int, verify: bool) -> dict[str, Any]:
    manifest = layout.read_manifest(fs, path)
    row: dict[str, Any] = {"steps": step, "path": fs.unstrip_protocol(path), "bytes": 0, "files": 0, "world_size": None,
                           "kind": "-", "created": None, "total_steps": None, "save_seconds": None}
    if manifest is None:
        if not fs.exists(path):
            return {**row, "state": PRUNED}
        try:
            found = fs.find(path, detail=True)  # no manifest to tell the size: what is there, as found
        except FileNotFoundError:
            return {**row, "state": PRUNED}
        row.update(bytes=sum(_size(entry) for entry in found.values()), files=len(found))
        if fs.exists(f"{path}/{layout.MANIFEST_NAME}"):
            return {**row, "state": f"damaged: {layout.MANIFEST_NAME} is not a readable manifest"}
        return {**row, "state": "incomplete (no manifest: a save cut short)"}
    files = manifest["files"]
    if (oversized := _oversized_file(files)) is not None:
        return {**row, "files": len(files), "state": f"damaged: {oversized}"}
    payload = manifest.get("payload")
    row.update(
        bytes=sum(size for entry in files.values() if isinstance(entry, dict) and _is_count(size := entry.get("size"))),
        files=len(files), world_size=_count_or_none(manifest.get("world_size")),
        created=_time_or_none(manifest.get("created")), total_steps=_count_or_none(manifest.get("total_steps")),
        save_seconds=layout.save_seconds_of(manifest),
        kind=payload if isinstance(payload, str) and payload else (
            "sharded" if layout.SHARDS_INDEX_NAME in files else "checkpointer"),
    )
    if not verify:
        return {**row, "state": "complete"}
    try:
        layout.verify_files(fs, path)
    except layout.CorruptCheckpoint as damage:
        return {**row, "state": PRUNED if layout.removed(fs, path) else f"damaged: {damage}"}
    if (problem := layout.unloadable(manifest)) is not None:
        return {**row, "state": f"damaged: {problem}"}
    return {**row, "state": "intact"}


def _size(entry: dict[str, Any]) -> int:
    """A found file's size as its filesystem says it (0 where it says none)."""
    size = entry.get("size")
    return size if _is_count(size) else 0


def _oversized_file(files: dict[str, Any]) -> str | None:
    """What is wrong with a manifest that lists a file larger than any filesystem holds, else None."""
    for name, entry in files.items():
        size = entry.get("size") if isinstance(entry, dict) else None
        if _is_count(size) and size > MAX_FILE_BYTES:
            return f"{name}'s size in the manifest ({byte_size(size)}) is past any file's"
    return None


# A manifest's facts as the listing shows them: a value of the wrong type (a manifest written by hand, or damaged)
# shows as unknown, and `--verify` says what is wrong with its files.
def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count_or_none(value: Any) -> int | None:
    return value if _is_count(value) else None


def _time_or_none(value: Any) -> float | None:
    """A unix time a clock can show (1970 to 9999), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 253_402_300_800:
        return None
    return float(value)
