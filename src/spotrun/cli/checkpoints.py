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

import typer
from rich.markup import escape
from rich.table import Table

from spotrun.cli.backend import current_backend
from spotrun.cli.command_groups import CommandGroup
from spotrun.cli.consoles import CliConsole, print_whole
from spotrun.cli.failing import BAD_ARGUMENT, errors
from spotrun.cli.failing import fail as _fail
from spotrun.cli.job_ids import positive_job_id
from spotrun.cli.formats import byte_size
from spotrun.control.job_errors import JobNotFound

app = typer.Typer(help="What a checkpoint store holds; a checkpoint's weights, whole, in one file.",
                  no_args_is_help=True, cls=CommandGroup)
console = CliConsole()

Location = Annotated[Optional[str], typer.Argument(help="checkpoint folder or URL (or give --job)", show_default=False)]
JobOption = Annotated[Optional[int], typer.Option(
    "--job", help="the checkpoint store of this job", callback=positive_job_id)]


def _location(location: str | None, job: int | None) -> str:
    if (location is None) == (job is None):
        raise _fail("give a checkpoint location or --job ID (one of them)", BAD_ARGUMENT)
    if location is not None:
        return location
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
    from spotrun.cli.checkpoint_folders import describe, folders, held_below, reach, why  # fsspec: these commands only

    where = _location(location, job)
    fs, root = reach(where, given=location is not None)
    try:
        rows = [describe(fs, path, step, verify) for step, path in folders(fs, root)]
    except Exception as error:  # the store stopped answering half-way: say so, whatever the filesystem raised
        raise _fail(f"{where}: cannot be read: {why(error)}") from None
    damaged = any(row["state"].startswith("damaged") for row in rows)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        raise typer.Exit(1 if damaged else 0)
    if not rows:
        console.print(f"{escape(where)}: no checkpoints{held_below(fs, root)}")
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


@app.command()
def export(
    output: Annotated[Path, typer.Argument(
        help="the file to write: torch.save's format, or safetensors for a name ending in .safetensors",
        show_default=False)],
    location: Location = None,
    job: JobOption = None,
    step: Annotated[Optional[int], typer.Option(
        min=0, help="the checkpoint of this many steps (default: newest intact)")] = None,
    component: Annotated[Optional[list[str]], typer.Option(
        help="only this component (repeatable); with one, the file holds its state alone, e.g. a model's state dict")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace OUTPUT if it exists")] = False,
) -> None:
    """Write a checkpoint's state to one file, sharded tensors put together whole: load it with
    `torch.load(OUTPUT, weights_only=False)` anywhere, without spotrun (e.g. `--component model` for a state dict),
    or, for OUTPUT.safetensors and one component of tensors alone (a model's), with safetensors."""
    from spotrun.cli.checkpoint_folders import reach

    where = _location(location, job)
    if output.is_dir():
        raise _fail(f"{output} is a folder: give the file to write", BAD_ARGUMENT)
    if output.exists() and not force:
        raise _fail(f"{output} exists: give --force to replace it", BAD_ARGUMENT)
    if output.exists() and not output.is_file():  # a device or a pipe: a rename would put a file in its place
        raise _fail(f"{output} is not a regular file: give a file to write", BAD_ARGUMENT)
    reach(where, given=location is not None)
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
