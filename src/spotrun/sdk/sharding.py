"""Sharded state (FSDP2's ``fully_shard``, tensor parallelism: any ``DTensor``) in a checkpoint.

Saving: every rank takes its state apart (``split``). Each DTensor becomes a ``ShardedTensor`` placeholder
(its global shape and dtype) in the state's structure, which rank 0 saves as before; the rank's own piece of it
(its local tensor and where that sits in the global tensor: a box of offsets and sizes) goes into its shards
file, ``shards-<rank>.pt``. A piece several ranks hold alike (a ``Replicate`` mesh dimension, as in HSDP) is
saved once, by the rank at coordinate 0 on those dimensions. Rank 0 writes the index of every piece
(``shards.idx``: path → [(file, offset, shape)]) from what the ranks report.

Restoring: each placeholder is filled in for the live state (``Assembly``). Where the live state holds a DTensor at
the same place (or, for an optimizer's state not created yet, its parameter is one), the rank needs the box that
DTensor's local tensor covers on this rank; elsewhere (a plain model: a consolidated copy, e.g. for evaluation)
the whole tensor. The box is filled from the pieces that overlap it, reading only the shards files that hold
them, one at a time. So the same layout reads back its own file, and a checkpoint saved by 8 ranks loads into 4,
into 16, or into one process. The other way round, a plain (unsharded) tensor in the checkpoint is cut to the box
a live DTensor needs.
"""

from __future__ import annotations

import copy
import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from spotrun.sdk.errors import CheckpointError, IncompatibleCheckpoint
from spotrun.sdk import layout
from spotrun.sdk.layout import CorruptCheckpoint

INDEX_FILE = layout.SHARDS_INDEX_NAME

Path = tuple[Any, ...]  # component name, then the keys and list positions down to the tensor
Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offset, shape) in the global tensor


def shards_file(rank: int) -> str:
    return f"shards-{rank:05d}.pt"


@dataclass(frozen=True)
class ShardedTensor:
    """Where a DTensor was: its global shape and dtype; its values are in the shards files."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


@functools.cache
def _dtensor_type() -> type | None:
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor

    return DTensor


def is_dtensor(value: Any) -> bool:
    kind = _dtensor_type()
    return kind is not None and isinstance(value, kind)


def dotted(path: Path) -> str:
    return ".".join(str(key) for key in path)


# -- saving -------------------------------------------------------------------------------------------------


@dataclass
class Split:
    """A state taken apart: its structure with placeholders, and this rank's pieces of the DTensors in it."""

    structure: Any
    pieces: dict[Path, tuple[tuple[int, ...], torch.Tensor]]  # path -> (offset, local tensor)

    def boxes(self) -> list[tuple[Path, tuple[int, ...], tuple[int, ...]]]:
        return [(path, offset, tuple(local.shape)) for path, (offset, local) in self.pieces.items()]


def split(components: Mapping[str, Any]) -> Split:
    """``components`` (a state dict per name) with every DTensor replaced by a placeholder; the pieces this rank
    saves. A state without DTensors comes back unchanged (the same objects)."""
    pieces: dict[Path, tuple[tuple[int, ...], torch.Tensor]] = {}
    if _dtensor_type() is None:
        return Split(dict(components), pieces)
    structure = {name: _split(value, (name,), pieces) for name, value in components.items()}
    return Split(structure, pieces)


def _split(value: Any, path: Path, pieces: dict[Path, tuple[tuple[int, ...], torch.Tensor]]) -> Any:
    def placeholder(path: Path, leaf: Any) -> Any:
        if not is_dtensor(leaf):
            return leaf
        offset, local, owned = _own_piece(leaf, path)
        if owned and local.numel():
            pieces[path] = (offset, local)
        return ShardedTensor(tuple(leaf.shape), str(leaf.dtype).removeprefix("torch."))

    return map_leaves(value, path, placeholder)


def _own_piece(tensor: Any, path: Path) -> tuple[tuple[int, ...], torch.Tensor, bool]:
    """(offset, local tensor, whether this rank saves it) of a DTensor on this rank."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if any(placement.is_partial() for placement in tensor.placements):
        raise CheckpointError(
            f"{dotted(path)}: a DTensor with a Partial placement ({tensor.placements}) holds partial sums, "
            "not values: redistribute it (Replicate or Shard) before saving"
        )
    local = tensor.to_local().detach()
    coordinate = tensor.device_mesh.get_coordinate()
    if coordinate is None:  # this rank is not in the tensor's mesh: it holds none of it
        return (), local, False
    shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    if tuple(shape) != tuple(local.shape):
        raise CheckpointError(
            f"{dotted(path)}: its local tensor is {tuple(local.shape)}, its placements {tensor.placements} say "
            f"{tuple(shape)}: a layout this SDK cannot save"
        )
    owned = all(
        coordinate[dim] == 0 for dim, placement in enumerate(tensor.placements) if placement.is_replicate()
    )
    return tuple(offset), local, owned


def build_index(reports: list[tuple[str, list[tuple[Path, tuple[int, ...], tuple[int, ...]]]]]) -> dict[Path, list]:
    """path -> [(file, offset, shape)] from each shards file's name and boxes."""
    index: dict[Path, list[tuple[str, tuple[int, ...], tuple[int, ...]]]] = defaultdict(list)
    for file, boxes in reports:
        for path, offset, shape in boxes:
            index[path].append((file, offset, shape))
    return dict(index)


# -- restoring ----------------------------------------------------------------------------------------------


@dataclass
class _Target:
    """What one placeholder (or plain tensor cut for a DTensor) becomes here: the box of the global tensor this
    rank holds, and the DTensor it is wrapped in (``template``: a live DTensor of the same layout; None for a
    plain tensor)."""

    path: Path
    shape: tuple[int, ...]
    dtype: torch.dtype
    box: Box
    template: Any

    def wrap(self, local: torch.Tensor) -> Any:
        if self.template is None:
            return local
        from torch.distributed.tensor import DTensor

        template = self.template
        return DTensor.from_local(
            local, template.device_mesh, template.placements, run_check=False,
            shape=template.shape, stride=template.stride(),
        )


def _box_of(template: Any) -> Box:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(template.shape, template.device_mesh, template.placements)
    return tuple(offset), tuple(shape)


class Assembly:
    """Fills in a loaded payload (the structure with placeholders) for the live state ``live`` (a state dict per
    component name) and its ``components`` (to find an optimizer's parameters)."""

    def __init__(self, payload: dict[str, Any], live: Mapping[str, Any], components: Mapping[str, Any]) -> None:
        self.payload = payload
        self.live = live
        self.components = components
        self._live_sharded = any(is_dtensor(tensor) for tensor in _tensors(live))
        self.targets: list[_Target] = []
        self.cuts: list[tuple[_Target, torch.Tensor]] = []  # plain tensors in the checkpoint, cut for a DTensor
        problems: list[str] = []
        for path, value in list(leaves(payload)):
            if isinstance(value, ShardedTensor):
                self._target_for_placeholder(path, value, problems)
            elif isinstance(value, torch.Tensor) and not is_dtensor(value):
                self._target_for_plain(path, value, problems)
        if problems:
            listed = "\n  ".join(problems)
            raise IncompatibleCheckpoint(f"the checkpoint does not fit this training state; nothing was loaded:\n  {listed}")

    @property
    def needed(self) -> bool:
        return bool(self.targets or self.cuts)

    @property
    def reads_pieces(self) -> bool:
        """Whether a box this rank needs holds any value, so that pieces (and the index of them) must be read: a
        DTensor with no elements has no piece saved, nor any entry in the index."""
        return any(math.prod(target.box[1]) for target in self.targets)

    def plan(self, index: Mapping[Path, list]) -> dict[str, list[tuple[_Target, Box]]]:
        """Per shards file, in name order, the saved pieces in it that overlap a box this rank needs."""
        plan: dict[str, list[tuple[_Target, Box]]] = defaultdict(list)
        for target in self.targets:
            if not math.prod(target.box[1]):  # an empty box: nothing to read (an empty tensor has no piece saved)
                continue
            pieces = index.get(target.path)
            if not isinstance(pieces, list):
                raise CorruptCheckpoint(f"{INDEX_FILE} lists no pieces of {dotted(target.path)}")
            for file, offset, shape in pieces:
                if _overlap((tuple(offset), tuple(shape)), target.box) is not None:
                    plan[file].append((target, (tuple(offset), tuple(shape))))
        return dict(sorted(plan.items()))

    def fill(self, plan: dict[str, list[tuple[_Target, Box]]], load: Callable[[str], Any]) -> dict[str, Any]:
        """The payload with every placeholder replaced by its box of the global tensor, read as ``plan`` says
        (``load(name)`` gives a shards file's pieces, path -> local tensor), one file at a time. A piece that is the
        whole box (the same layout, or a whole tensor for a plain model) is taken as read, without a copy."""
        buffers: dict[Path, torch.Tensor] = {}
        filled = {target.path: 0 for target in self.targets}
        for file, overlapping in plan.items():
            pieces = load(file)
            if not isinstance(pieces, dict):
                raise CorruptCheckpoint(f"{file} holds a {type(pieces).__name__}, not pieces of tensors")
            for target, piece in overlapping:
                local = _saved_piece(pieces, file, target.path, piece)
                if piece == target.box and target.path not in buffers and local.dtype == target.dtype:
                    buffers[target.path] = local
                    filled[target.path] += local.numel()
                    continue
                if target.path not in buffers:
                    buffers[target.path] = torch.empty(target.box[1], dtype=target.dtype)
                filled[target.path] += _copy_overlap(local, piece, target.box, buffers[target.path])
            del pieces
        for target in self.targets:
            if filled[target.path] != math.prod(target.box[1]):
                raise CorruptCheckpoint(
                    f"{dotted(target.path)}: the saved pieces cover {filled[target.path]} of the "
                    f"{math.prod(target.box[1])} values this rank needs"
                )
        replaced = {
            target.path: target.wrap(buffers.get(target.path, torch.empty(target.box[1], dtype=target.dtype)))
            for target in self.targets
        }
        replaced.update({target.path: target.wrap(_cut(value, target.box)) for target, value in self.cuts})
        return map_leaves(self.payload, (), lambda path, leaf: replaced.get(path, leaf))

    # -- where each tensor goes --

    def _target_for_placeholder(self, path: Path, saved: ShardedTensor, problems: list[str]) -> None:
        live = self._live_counterpart(path)
        if live is not None and tuple(live.shape) != saved.shape and (is_dtensor(live) or self._shapes_checked(path)):
            problems.append(f"{dotted(path)}: shape {saved.shape} in the checkpoint, {tuple(live.shape)} here")
        elif is_dtensor(live):
            self.targets.append(_Target(path, saved.shape, saved.torch_dtype, _box_of(live), live))
        elif live is not None or not self._live_sharded:
            self.targets.append(_Target(path, saved.shape, saved.torch_dtype, ((0,) * len(saved.shape), saved.shape), None))
        else:
            problems.append(
                f"{dotted(path)}: saved sharded, and nothing in this training state (a DTensor at the same place, or "
                "the optimizer's parameter) tells how to shard it here"
            )

    def _target_for_plain(self, path: Path, saved: torch.Tensor, problems: list[str]) -> None:
        live = self._live_counterpart(path)
        if not is_dtensor(live):
            return
        if tuple(live.shape) != tuple(saved.shape):
            problems.append(f"{dotted(path)}: shape {tuple(saved.shape)} in the checkpoint, {tuple(live.shape)} here")
            return
        self.cuts.append((_Target(path, tuple(saved.shape), saved.dtype, _box_of(live), live), saved))

    def _shapes_checked(self, path: Path) -> bool:
        """Whether the component at ``path`` must keep its tensors' shapes (a module's, an optimizer's: see
        ``compat``), unlike a dict of user values, which the checkpoint's replace."""
        return isinstance(self.components.get(path[0]), (torch.nn.Module, torch.optim.Optimizer))

    def _live_counterpart(self, path: Path) -> Any:
        """The live tensor at ``path``; for an optimizer's per-parameter state not created yet (no step taken), its
        parameter, whose layout the state shares; None when there is neither."""
        found = _lookup(self.live, path)
        if isinstance(found, torch.Tensor):
            return found
        return self._optimizer_parameter(path)

    def _optimizer_parameter(self, path: Path) -> Any:
        name = path[0]
        if not (isinstance(self.components.get(name), torch.optim.Optimizer) and len(path) == 4 and path[1] == "state"):
            return None
        param = self._parameters_by_saved_id(name).get(path[2])
        saved = _lookup(self.payload, path)
        return param if param is not None and getattr(saved, "shape", None) == tuple(param.shape) else None

    @functools.cache  # noqa: B019 (an Assembly lives for one restore)
    def _parameters_by_saved_id(self, name: str) -> dict[Any, Any]:
        """The optimizer's live parameters by the ids its saved state uses (both in parameter-group order); empty
        when the groups do not match."""
        saved = self.payload.get(name)
        groups = saved.get("param_groups") if isinstance(saved, dict) else None
        saved_ids = [pid for group in groups or [] if isinstance(group, dict) for pid in group.get("params", [])]
        params = [param for group in self.components[name].param_groups for param in group["params"]]
        return dict(zip(saved_ids, params, strict=True)) if len(saved_ids) == len(params) else {}


def _saved_piece(pieces: dict, file: str, path: Path, piece: Box) -> torch.Tensor:
    local = pieces.get(path)
    if not isinstance(local, torch.Tensor) or tuple(local.shape) != piece[1]:
        raise CorruptCheckpoint(f"{file}: its piece of {dotted(path)} is missing or not of the shape {INDEX_FILE} lists")
    return local


def _copy_overlap(local: torch.Tensor, piece: Box, box: Box, buffer: torch.Tensor) -> int:
    """Copy the part of a saved piece inside ``box`` into its buffer; the number of values copied."""
    overlap = _overlap(piece, box)
    if overlap is None:
        return 0
    source = tuple(slice(low - start, high - start) for (low, high), start in zip(overlap, piece[0], strict=True))
    destination = tuple(slice(low - start, high - start) for (low, high), start in zip(overlap, box[0], strict=True))
    buffer[destination].copy_(local[source])
    return math.prod(high - low for low, high in overlap)


def _overlap(first: Box, second: Box) -> list[tuple[int, int]] | None:
    """Per dimension (low, high) of where two boxes meet; None when they do not (an empty box meets nothing)."""
    ranges = []
    for start_a, size_a, start_b, size_b in zip(first[0], first[1], second[0], second[1], strict=True):
        low, high = max(start_a, start_b), min(start_a + size_a, start_b + size_b)
        if low >= high:
            return None
        ranges.append((low, high))
    return ranges


def _cut(tensor: torch.Tensor, box: Box) -> torch.Tensor:
    return tensor[tuple(slice(start, start + size) for start, size in zip(*box, strict=True))].contiguous()


def leaves(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, leaf) of everything in ``value`` that is not a dict, list or plain tuple, in order."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path, value


def _tensors(value: Any) -> Iterator[Any]:
    return (leaf for _, leaf in leaves(value) if isinstance(leaf, torch.Tensor))


def _lookup(tree: Any, path: Path) -> Any:
    for key in path:
        if isinstance(tree, Mapping):
            tree = tree.get(key)
        elif isinstance(tree, (list, tuple)) and isinstance(key, int) and 0 <= key < len(tree):
            tree = tree[key]
        else:
            return None
    return tree


def map_leaves(value: Any, path: Path, change: Callable[[Path, Any], Any]) -> Any:
    """``value`` with each leaf (what is not a dict, list or plain tuple) replaced by ``change(path, leaf)``; dicts
    are copied with their type and attributes (a state_dict's ``_metadata``)."""
    if isinstance(value, dict):
        updated = copy.copy(value)
        for key, item in value.items():
            updated[key] = map_leaves(item, (*path, key), change)
        return updated
    if isinstance(value, list):
        return [map_leaves(item, (*path, index), change) for index, item in enumerate(value)]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(map_leaves(item, (*path, index), change) for index, item in enumerate(value))
    return change(path, value)
