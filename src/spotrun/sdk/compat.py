"""Whether a checkpoint's state fits the live components. Every component is checked before any is
loaded, so a checkpoint of another model shape or configuration leaves the training state untouched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def mismatches(name: str, component: Any, saved: Any) -> list[str]:
    """Why ``saved`` cannot be loaded into ``component`` (named ``name``); empty when it fits.

    Modules are checked key by key and shape by shape, optimizers by their parameter groups and per-parameter
    state; any other component may define ``state_dict_mismatches(state) -> list[str]``.
    """
    if isinstance(component, torch.nn.Module):
        return _module_mismatches(name, component, saved)
    if isinstance(component, torch.optim.Optimizer):
        return _optimizer_mismatches(name, component, saved)
    check = getattr(component, "state_dict_mismatches", None)
    return [f"{name}: {problem}" for problem in check(saved)] if callable(check) else []


def _shape(tensor: torch.Tensor) -> str:
    return str(tuple(tensor.shape))


def _module_mismatches(name: str, module: torch.nn.Module, saved: Any) -> list[str]:
    if not isinstance(saved, Mapping):
        return [f"{name}: the checkpoint holds a {type(saved).__name__}, not a state dict"]
    live = module.state_dict()
    problems = [f"{name}.{key}: missing from the checkpoint" for key in live if key not in saved]
    problems += [f"{name}.{key}: in the checkpoint, not in this model" for key in saved if key not in live]
    for key, tensor in live.items():
        stored = saved.get(key)
        if isinstance(tensor, torch.Tensor) and isinstance(stored, torch.Tensor) and stored.shape != tensor.shape:
            problems.append(f"{name}.{key}: shape {_shape(stored)} in the checkpoint, {_shape(tensor)} here")
    return problems


def _optimizer_mismatches(name: str, optimizer: torch.optim.Optimizer, saved: Any) -> list[str]:
    if not (isinstance(saved, Mapping) and isinstance(saved.get("param_groups"), list)):
        return [f"{name}: the checkpoint holds no optimizer state dict"]
    saved_groups, live_groups = saved["param_groups"], optimizer.param_groups
    if len(saved_groups) != len(live_groups):
        return [f"{name}: {len(saved_groups)} parameter groups in the checkpoint, {len(live_groups)} here"]
    problems = []
    for index, (stored, live) in enumerate(zip(saved_groups, live_groups, strict=True)):
        stored_count = len(stored.get("params", ())) if isinstance(stored, Mapping) else None
        if stored_count != len(live["params"]):
            problems.append(
                f"{name}: parameter group {index} has {stored_count} parameters in the checkpoint, "
                f"{len(live['params'])} here"
            )
    return problems or _optimizer_state_mismatches(name, optimizer, saved)


def _optimizer_state_mismatches(name: str, optimizer: torch.optim.Optimizer, saved: Mapping[str, Any]) -> list[str]:
    """Per-parameter state tensors (e.g. Adam's moments) against this optimizer's own, where it has any yet."""
    saved_state = saved.get("state")
    if not isinstance(saved_state, Mapping):
        return [f"{name}: the checkpoint's optimizer state is a {type(saved_state).__name__}, not a dict"]
    saved_ids = [param_id for group in saved["param_groups"] for param_id in group["params"]]
    params = [param for group in optimizer.param_groups for param in group["params"]]
    problems = []
    for index, (param_id, param) in enumerate(zip(saved_ids, params, strict=True)):
        stored = saved_state.get(param_id)
        live = optimizer.state.get(param, {})
        if not isinstance(stored, Mapping):
            continue
        for key, value in stored.items():
            current = live.get(key)
            if isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor) and value.shape != current.shape:
                problems.append(
                    f"{name}: state {key!r} of parameter {index}: shape {_shape(value)} in the checkpoint, "
                    f"{_shape(current)} here"
                )
    return problems
