"""Restoring a module's CPU tensors without copying them: each parameter or buffer takes the storage the
checkpoint's tensor was just read into (``tensor.data = loaded``), instead of ``load_state_dict`` copying the
loaded bytes over its own. The copy is a serial step at the very end of a restore (0.05-0.16 s for 0.31 GiB here),
after every byte was read and verified; adopting the storage costs nothing, and the memory the module held
before is freed instead of the loaded one.

It is done only where nobody can tell the difference:
- both tensors are plain CPU tensors (or parameters) of the same dtype, shape and strides, the live one a leaf;
- the live tensor is the whole of its storage (not a view into a flat buffer, as FSDP's are), and so is the
  loaded one;
- live and loaded tensors pair one to one: storage sharing (tied weights) is the same on both sides, and no
  other part of the checkpoint (another component) holds the loaded storage;
- no module in the tree has a load_state_dict pre-hook or its own ``_load_from_state_dict`` (either may
  rewrite the values before they are copied), except torch.nn's own modules (BatchNorm's only adds a counter).
Everything else is loaded by ``load_state_dict`` as before; for adopted tensors its ``copy_`` finds the
source and destination the same memory and returns at once. Parameter objects keep their identity, so
optimizers and hooks that hold them are unaffected.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import torch

_TRUSTED_PACKAGE = "torch.nn.modules."


def adopt_storages(module: torch.nn.Module, saved: Mapping[str, Any], payload: Any) -> int:
    """Point ``module``'s parameters and buffers at the tensors of ``saved`` (a state dict that fits it, as
    checked by ``compat``) wherever that is the same as copying them in; the number of bytes adopted.
    ``payload``: everything loaded with ``saved`` (which it contains), whose other tensors must not share the
    storages adopted. Call it right before ``module.load_state_dict(saved)``."""
    if not _loads_plainly(module):
        return 0
    pairs = []
    for name, live in _named_tensors(module):
        loaded = saved.get(name)
        if isinstance(loaded, torch.Tensor):
            live_at, loaded_at = _address(live), _address(loaded)
            if live_at is not None and loaded_at is not None:
                pairs.append(_Pair(live, loaded, live_at, loaded_at))
    holders = Counter(address for tensor in _tensors_in(payload) if (address := _address(tensor)) is not None)
    adopted = 0
    with torch.no_grad():
        for pair in _one_to_one(pairs, holders):
            if _adoptable(pair.live, pair.loaded):
                pair.live.data = pair.loaded
                adopted += pair.loaded.nbytes
    return adopted


class _Pair(NamedTuple):
    """A live tensor of the module, the loaded tensor of the same name, and where each one's storage lives."""

    live: torch.Tensor
    loaded: torch.Tensor
    live_at: int
    loaded_at: int


def _loads_plainly(module: torch.nn.Module) -> bool:
    """Whether ``load_state_dict`` copies each saved tensor, unchanged, into the tensor of the same name."""
    for submodule in module.modules():
        if submodule._load_state_dict_pre_hooks:
            return False
        owner = next(cls for cls in type(submodule).__mro__ if "_load_from_state_dict" in vars(cls))
        if owner is not torch.nn.Module and not owner.__module__.startswith(_TRUSTED_PACKAGE):
            return False
    return True


def _named_tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor object in a nest of dicts, lists and tuples, once per place it is held."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)


def _one_to_one(pairs: list[_Pair], holders: Counter[int]) -> list[_Pair]:
    """The pairs in which the live tensor and the loaded storage are paired with nothing else, neither live storage
    shared by another live tensor nor loaded storage held by the rest of the payload (``holders``: how many places
    in the whole payload hold each loaded storage). A tensor that appears under two names (tied by sharing one
    Parameter) is one pair if both names load the same storage."""
    lives_of_loaded: defaultdict[int, set[int]] = defaultdict(set)
    loaded_of_live: defaultdict[int, set[int]] = defaultdict(set)
    lives_of_storage: defaultdict[int, set[int]] = defaultdict(set)
    names_of_loaded: Counter[int] = Counter()
    for pair in pairs:
        lives_of_loaded[pair.loaded_at].add(id(pair.live))
        loaded_of_live[id(pair.live)].add(pair.loaded_at)
        lives_of_storage[pair.live_at].add(id(pair.live))
        names_of_loaded[pair.loaded_at] += 1
    unique = {
        id(pair.live): pair
        for pair in pairs
        if holders[pair.loaded_at] == names_of_loaded[pair.loaded_at]
        and len(lives_of_loaded[pair.loaded_at]) == len(loaded_of_live[id(pair.live)]) == 1
        and len(lives_of_storage[pair.live_at]) == 1
    }
    return list(unique.values())


def _address(tensor: torch.Tensor) -> int | None:
    """Where the tensor's storage lives; None for a tensor with no plain storage (sparse, some subclasses), which is
    left to ``load_state_dict``."""
    if tensor.layout != torch.strided:
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def _adoptable(live: torch.Tensor, loaded: torch.Tensor) -> bool:
    return (
        type(live) in (torch.Tensor, torch.nn.Parameter)
        and type(loaded) is torch.Tensor
        and live.is_leaf
        and not loaded.requires_grad
        and live.device.type == loaded.device.type == "cpu"
        and live.dtype == loaded.dtype
        and live.shape == loaded.shape
        and live.stride() == loaded.stride()
        and _whole_storage(live)
        and _whole_storage(loaded)
    )


def _whole_storage(tensor: torch.Tensor) -> bool:
    return (
        tensor.storage_offset() == 0
        and tensor.is_contiguous()
        and tensor.untyped_storage().nbytes() == tensor.nbytes
        and not (tensor.is_conj() or tensor.is_neg() or tensor.is_quantized)
    )
