"""A fingerprint of a model's weights, to compare runs bit for bit."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch


def weights_sha256(module_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor]) -> str:
    """Hex SHA-256 over ``(name, tensor)`` of the state dict in order: the name's UTF-8 bytes, then the
    tensor's contiguous CPU bytes (dtype and shape are not hashed: the same model is compared to itself)."""
    state = (
        module_or_state_dict.state_dict()
        if isinstance(module_or_state_dict, torch.nn.Module)
        else module_or_state_dict
    )
    digest = hashlib.sha256()
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state dict entry {name!r} is a {type(tensor).__name__}, not a tensor")
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
