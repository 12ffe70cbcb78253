"""`spotrun checkpoints`: what a job's checkpoint store holds, and its weights taken out whole.

A location is a folder or URL (`s3://`, `gs://`, ...: credentials and endpoints as fsspec reads them, e.g.
`FSSPEC_S3_ENDPOINT_URL`), or a job's own store (`--job ID`, as the store of `spotrun status` knows it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Annotated, Any, Optional

import fsspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from spotrun.cli.failing import BAD_ARGUMENT, FAILED, errors
from spotrun.cli.failing import fail as _fail
from spotrun.cli.job_ids import positive_job_id
from spotrun.cli.views import MAX_FILE_BYTES, byte_size, print_whole
from spotrun.sdk import layout
from spotrun.sdk.locations import url_to_fs

app = typer.Typer(help="What a checkpoint store holds; a checkpoint's weights, whole, in one file.", no_args_is_help=True)
console = Console()

Location = Annotated[Optional[str], typer.Argument(help="checkpoint folder or URL (or give --job)", show_default=False)]
JobOption = Annotated[Optional[int], typer.Option(
    "--job", help="the checkpoint store of this job", callback=positive_job_id)]


def _location(location: str | None, job: int | None) -> str:
    if (location is None) == (job is None):
        raise _fail("give a checkpoint location or --job ID (one of them)", BAD_ARGUMENT)
    if location is not None:
        return location
    from spotrun.cli.backend import current_backend
    from spotrun.control.jobs import JobNotFound

    try:
        store = current_backend().detail(job).checkpoint_store  # type: ignore[arg-type]
    except JobNotFound as missing:
        raise _fail(str(missing)) from None
    if not store:
        raise _fail(f"job {job} has no checkpoint store on record")
    return store


@app.command(name="list")
def list_checkpoints(
    location: Location = None,
    job: JobOption = None,
    verify: Annotated[bool, typer.Option("--verify", help="read every file and check it against its manifest")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """The checkpoints in a store, newest last: steps, size, ranks, and whether each is complete (and intact).
    With --verify the exit code is 1 when one is damaged."""
    where = _location(location, job)
    fs, root = _reach(where, given=location is not None)
    try:
        rows = [_describe(fs, path, step, verify) for step, path in _folders(fs, root)]
    except Exception as error:  # the store stopped answering half-way: say so, whatever the filesystem raised
        raise _fail(f"{where}: cannot be read: {_why(error)}") from None
    damaged = any(row["state"].startswith("damaged") for row in rows)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        raise typer.Exit(1 if damaged else 0)
    if not rows:
        console.print(f"{escape(where)}: no checkpoints{_held_below(fs, root)}")
        return
    table = Table("steps", "state", "size", "files", "ranks", "kind", "save", "written", title=escape(where))
    for row in rows:
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["created"])) if row["created"] else "-"
        table.add_row(
            str(row["steps"]), escape(row["state"]), byte_size(row["bytes"]), str(row["files"]),
            str(row["world_size"] or "-"), escape(row["kind"]),  # its manifest's words
            f"{row['save_seconds']:.1f} s" if row["save_seconds"] is not None else "-", written,
        )
    print_whole(console, table)  # piped: as wide as the table, not cut to 80 columns
    if damaged:
        raise _fail(f"{where}: {sum(row['state'].startswith('damaged') for row in rows)} damaged checkpoint(s)")


def _reach(where: str, *, given: bool) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and folder of ``where``; a clear error when it names no filesystem, cannot be reached (no
    credentials, no such bucket, ...) or is no folder. A location the user ``given`` that is no folder is a bad
    argument (exit 2, as a job file that is none is to `launch`); a job's store on record that is none is not."""
    try:
        fs, root = url_to_fs(where)
        exists = fs.isdir(root)
        a_file = not exists and fs.isfile(root)
    except Exception as error:  # fsspec and its backends raise their own kinds (ValueError, botocore's, ...)
        raise _fail(f"{where}: cannot be read: {_why(error)}") from None
    if not exists:
        what = "is a file, not a checkpoint folder" if a_file else "no such checkpoint folder"
        raise _fail(f"{where}: {what}", BAD_ARGUMENT if given else FAILED)
    return fs, root


LOOKED_BELOW = 20  # folders of a folder without checkpoints looked into, at most (a bucket may hold thousands)


def _held_below(fs: fsspec.AbstractFileSystem, root: str) -> str:
    """Where one level down checkpoints are, as a hint (`SPOTRUN_HOME/checkpoints` holds a folder per job), or ""."""
    try:
        folders = [entry["name"] for entry in fs.ls(root, detail=True) if entry.get("type") == "directory"]
        holding = [folder for folder in sorted(folders)[:LOOKED_BELOW] if _folders(fs, folder)]
    except Exception:  # only a hint: the listing itself answered
        return ""
    if not holding:
        return ""
    names = ", ".join(escape(folder.rstrip("/").rsplit("/", 1)[-1]) for folder in holding[:5])
    more = f" and {len(holding) - 5} more" if len(holding) > 5 else ""
    return f"; folders in it hold some: {names}{more} (list one of them, or give --job ID)"


def _why(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _folders(fs: fsspec.AbstractFileSystem, root: str) -> list[tuple[int, str]]:
    fs.invalidate_cache(root)
    return sorted((step, path) for path in fs.ls(root, detail=False) if (step := layout.parse_step(path)) is not None)


PRUNED = "pruned meanwhile (removed by its writer while read)"  # its writer's keep_last, not damage


def _describe(fs: fsspec.AbstractFileSystem, path: str, step: int, verify: bool) -> dict[str, Any]:
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


@app.command()
def export(
    output: Annotated[Path, typer.Argument(
        help="the file to write: torch.save's format, or safetensors for a name ending in .safetensors",
        show_default=False)],
    location: Location = None,
    job: JobOption = None,
    step: Annotated[Optional[int], typer.Option(help="the checkpoint of this many steps (default: newest intact)")] = None,
    component: Annotated[Optional[list[str]], typer.Option(
        help="only this component (repeatable); with one, the file holds its state alone, e.g. a model's state dict")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace OUTPUT if it exists")] = False,
) -> None:
    """Write a checkpoint's state to one file, sharded tensors put together whole: load it with
    `torch.load(OUTPUT, weights_only=False)` anywhere, without spotrun (e.g. `--component model` for a state dict),
    or, for OUTPUT.safetensors and one component of tensors alone (a model's), with safetensors."""
    where = _location(location, job)
    if output.is_dir():
        raise _fail(f"{output} is a folder: give the file to write", BAD_ARGUMENT)
    if output.exists() and not force:
        raise _fail(f"{output} exists: give --force to replace it", BAD_ARGUMENT)
    if output.exists() and not output.is_file():  # a device or a pipe: a rename would put a file in its place
        raise _fail(f"{output} is not a regular file: give a file to write", BAD_ARGUMENT)
    _reach(where, given=location is not None)
    import torch

    from spotrun.sdk.errors import CheckpointError, CheckpointWarning
    from spotrun.sdk.reading import load_checkpoint
    from spotrun.sdk.sharding import leaves

    try:
        with warnings.catch_warnings(record=True) as skipped:
            warnings.simplefilter("always", CheckpointWarning)
            loaded = load_checkpoint(where, step=step, components=component)
    except CheckpointError as problem:
        raise _fail(str(problem)) from None
    finally:
        for warning in skipped:
            errors.print(f"[yellow]warning:[/] {escape(str(warning.message))}", soft_wrap=True)
    content = loaded.state[component[0]] if component and len(component) == 1 else loaded.state
    try:
        if output.suffix == ".safetensors":
            data = _safetensors_bytes(content, {"spotrun_checkpoint": loaded.path, "spotrun_steps": str(loaded.steps)})
            _write_atomically(output, lambda fh: fh.write(data))
        else:
            _write_atomically(output, lambda fh: torch.save(content, fh))
    except OSError as problem:  # a parent that is a file, a folder not writable, a full disk
        raise _fail(f"{output}: cannot be written: {problem.strerror or problem}") from None
    tensors = [value for _, value in leaves(content) if isinstance(value, torch.Tensor)]
    size = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
    what = ", ".join(component) if component else ", ".join(loaded.state)
    console.print(f"wrote {escape(what)} of {escape(loaded.path)} ({loaded.steps} steps): {len(tensors)} tensors, "
                  f"{byte_size(size)}, to {escape(str(output))}")


def _safetensors_bytes(content: Any, metadata: dict[str, str]) -> bytes:
    """``content`` in the safetensors format: a flat mapping of names to tensors (tensors that share memory, as
    tied weights do, each written whole)."""
    import torch

    try:
        from safetensors.torch import save
    except ImportError:
        raise _fail("writing .safetensors needs the safetensors package: pip install safetensors") from None
    others = sorted(str(name) for name, value in content.items() if not isinstance(value, torch.Tensor)) \
        if isinstance(content, dict) else None
    if others is None or others:
        held = f"it holds {', '.join(others[:5])}" if others else "it is not a mapping of tensors"
        raise _fail(f"safetensors holds tensors by name only; {held}: give one --component of tensors (a model's)",
                    BAD_ARGUMENT)
    seen: set[int] = set()
    tensors = {}
    for name, tensor in content.items():
        whole = tensor.detach().contiguous()
        if whole.untyped_storage().data_ptr() in seen:
            whole = whole.clone()
        seen.add(whole.untyped_storage().data_ptr())
        tensors[str(name)] = whole
    return save(tensors, metadata=metadata)


def _write_atomically(output: Path, write: Any) -> None:
    """Write beside ``output``, then rename over it: an interrupted export leaves no half-written file."""
    output.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # as any new file; mkstemp's are the owner's alone
        with os.fdopen(handle, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, output)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
