"""Replicated state written by every rank, not rank 0 alone.

Under DDP every rank holds the same weights and optimizer state, and rank 0 used to write all of it: on a multi-node
job that saves to an object store, one node's upload carries the whole state while the others wait. Here the large
tensors of the shared state (``SPREAD_MIN_BYTES`` and up) are dealt out among the ranks, largest first to the least
loaded. Each rank writes its own tensors into its shards file as whole pieces (see ``sharding``), and rank 0's
structure holds placeholders for them.

Tensors sharing a storage (tied weights, a view saved beside its base) come back sharing it only from one file, as
one snapshot of them is written once (``snapshot``, ``tensorfile``). So they go as one: a tensor of any size that
shares its storage with a large one is dealt out with it, and where rank 0 must write one of them, it writes them all.

The shared state is rank 0's by contract, and a tensor may differ on another rank (BatchNorm's running statistics
between DDP's broadcasts, a value a user keeps per rank). So every rank hashes what it wrote, and rank 0 hashes its
own copy of each; a tensor whose hashes differ, or that its rank did not write, is written by rank 0 into
``replicas-00000.pt`` and indexed there, with whatever shares its storage. The checkpoint always holds rank 0's
values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from spotrun.sdk import sharding, snapshot
from spotrun.sdk.layout import CHECKSUM, CHECKSUMS

SPREAD_MIN_BYTES = 1 << 20  # smaller tensors stay in rank 0's file: an index entry and a hash each cost more
FALLBACK_FILE = "replicas-00000.pt"

_Members = list[tuple[sharding.Path, torch.Tensor]]


def plan(structure: Mapping[str, Any], world_size: int) -> dict[sharding.Path, int]:
    """Which rank writes each large plain tensor of the shared ``structure``, and each tensor sharing a storage with
    one (the same on every rank, as the structure is)."""
    groups = [members for members in by_storage(_plain_tensors(structure)).values()
              if any(_nbytes(tensor) >= SPREAD_MIN_BYTES for _, tensor in members)]
    load = [0] * world_size
    assignment: dict[sharding.Path, int] = {}
    for group in sorted(groups, key=lambda members: -written_bytes(members)):
        rank = min(range(world_size), key=lambda candidate: (load[candidate], candidate))
        load[rank] += written_bytes(group)
        assignment.update((path, rank) for path, _ in group)
    return assignment


def written_bytes(group: _Members) -> int:
    """The bytes a file holds for tensors sharing one storage: a lone tensor's own, else the span of the storage they
    view, written once (``snapshot``). Their sum counted a tied weight twice, and a rank was dealt too little."""
    if len(group) == 1:
        return _nbytes(group[0][1])
    spans = [snapshot.byte_range(tensor) for _, tensor in group]
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _plain_tensors(structure: Mapping[str, Any]) -> Iterator[tuple[sharding.Path, torch.Tensor]]:
    """The tensors of ``structure`` that may be dealt out: not DTensors (``sharding`` writes those), and not empty ones,
    which view no bytes (and may all report one null address)."""
    for path, leaf in sharding.leaves(structure):
        if isinstance(leaf, torch.Tensor) and not sharding.is_dtensor(leaf) and leaf.numel():
            yield path, leaf



def by_storage(tensors: Iterable[tuple[sharding.Path, torch.Tensor]]) -> dict[Any, _Members]:
    """``tensors`` grouped by the storage they view, in order."""
    groups: dict[Any, _Members] = defaultdict(list)
    for path, tensor in tensors:
        groups[(tensor.device, tensor.untyped_storage().data_ptr())].append((path, tensor))
    return groups


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@dataclass
class Spread:
    """One rank's part of the shared state's writing."""

    structure: Any  # rank 0: the shared structure, placeholders where other ranks write; others: unused
    mine: dict[sharding.Path, torch.Tensor] = field(default_factory=dict)  # rank > 0: the tensors it writes
    others: dict[sharding.Path, torch.Tensor] = field(default_factory=dict)  # rank 0: its copies of those, to check


def take_apart(structure: Mapping[str, Any], assignment: Mapping[sharding.Path, int], rank: int) -> Spread:
    """``structure`` split for ``rank`` as ``assignment`` says."""
    if rank != 0:
        mine = {path: leaf for path, leaf in sharding.leaves(structure) if assignment.get(path) == rank}
        return Spread(structure=None, mine=mine)
    others: dict[sharding.Path, torch.Tensor] = {}

    def placeholder(path: sharding.Path, leaf: Any) -> Any:
        if not assignment.get(path):  # rank 0's own, or not spread
            return leaf
        others[path] = leaf
        return sharding.ShardedTensor(tuple(leaf.shape), str(leaf.dtype).removeprefix("torch."))

    return Spread(sharding.map_leaves(structure, (), placeholder), others=others)


def digest(tensor: torch.Tensor) -> str:
    """A checksum of the tensor's values (its dtype, shape and bytes)."""
    hasher = CHECKSUMS[CHECKSUM]()
    hasher.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    hasher.update(memoryview(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return hasher.hexdigest()


def settle(
    reports: Iterable[tuple[str, Mapping[sharding.Path, str]]], expected: Mapping[sharding.Path, str],
    ties: Iterable[Iterable[sharding.Path]],
) -> tuple[dict[sharding.Path, str], list[sharding.Path]]:
    """Rank 0: from each shards file's name and the digests of the whole tensors its rank wrote, the file that holds
    each of ``expected`` (path -> rank 0's digest) with rank 0's values; and the paths rank 0 must write itself.
    ``ties``: the paths of each storage several of them share, which one file must hold: where rank 0 writes one of
    them (a base its rank held other values of, beyond its view), it writes them all."""
    written = {path: file for file, digests in reports for path, value in digests.items() if expected.get(path) == value}
    apart = {path for paths in map(list, ties) if not all(path in written for path in paths) for path in paths}
    written = {path: file for path, file in written.items() if path not in apart}
    return written, [path for path in expected if path not in written]
