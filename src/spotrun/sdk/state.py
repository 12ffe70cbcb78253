"""What a checkpoint holds: named components (anything with state_dict/load_state_dict, or a plain dict of
user values updated in place on restore), split into the state shared by all ranks and each rank's own
(by default only the RNG states are per-rank)."""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from spotrun.sdk.accumulation import GradientWatch
from spotrun.sdk.adopt import adopt_storages
from spotrun.sdk.compat import mismatches
from spotrun.sdk.errors import CheckpointError, CheckpointWarning, IncompatibleCheckpoint, UnknownComponents

RNG_COMPONENT = "rng"


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


class RNGState:
    """Python, NumPy and torch (CPU, and every CUDA device when CUDA is initialised) global RNG states."""

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def state_dict_mismatches(self, state: Any) -> list[str]:
        if not isinstance(state, Mapping):
            return [f"the checkpoint holds a {type(state).__name__}, not RNG states"]
        return [f"no {kind} RNG state in the checkpoint" for kind in ("python", "numpy", "torch") if kind not in state]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            _set_cuda_rng_states(state["cuda"])


def _set_cuda_rng_states(states: list[torch.Tensor]) -> None:
    """Each CUDA device's RNG state from the checkpoint, device by device. A machine with another number of
    devices than the one that saved gets the states of the devices both have, and a warning: draws on the
    others will differ from an uninterrupted run's."""
    count = torch.cuda.device_count()
    if len(states) != count:
        warnings.warn(
            f"the checkpoint holds CUDA RNG states of {len(states)} devices, this machine has {count}: "
            f"devices {min(len(states), count)} and up do not resume their random streams exactly",
            CheckpointWarning,
            stacklevel=4,
        )
    for device, device_state in enumerate(states[:count]):
        torch.cuda.set_rng_state(device_state, device)


class _DictComponent:
    """A user dict saved by value and restored in place, so the caller's references stay valid: the dict itself, and
    each tensor in it (a tensor an optimizer trains, say) where the saved one has its shape and dtype."""

    def __init__(self, values: MutableMapping[str, Any]) -> None:
        self.values = values

    def state_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _restore_mapping(self.values, state)


def _restore_mapping(values: MutableMapping[Any, Any], state: Mapping[Any, Any]) -> None:
    for key in [key for key in values if key not in state]:
        del values[key]
    for key, saved in state.items():
        values[key] = _restored(values[key], saved) if key in values else saved


def _restored(current: Any, saved: Any) -> Any:
    """``saved`` put into ``current`` where it fits (a tensor of the same shape and dtype: copied into it, its
    identity and requires_grad kept; a dict: restored key by key), else ``saved`` itself."""
    if isinstance(current, torch.Tensor) and isinstance(saved, torch.Tensor):
        if current.shape == saved.shape and current.dtype == saved.dtype and not current.is_inference():
            with torch.no_grad():
                current.copy_(saved)
            return current
        return saved
    if isinstance(current, MutableMapping) and isinstance(saved, Mapping) and type(current) is type(saved):
        _restore_mapping(current, saved)
        return current
    return saved


def _as_stateful(name: str, component: Any) -> Stateful:
    if isinstance(component, Stateful):
        return component
    if isinstance(component, MutableMapping):
        return _DictComponent(component)
    raise TypeError(
        f"state component {name!r} ({type(component).__name__}) has no state_dict/load_state_dict and is not a dict"
    )


class TrainingState:
    """Named components captured and restored together.

    ``per_rank`` names the components every rank saves for itself; the others are saved by rank 0 only.
    """

    def __init__(self, components: Mapping[str, Any], per_rank: Iterable[str] = (RNG_COMPONENT,)) -> None:
        self.components = {name: _as_stateful(name, value) for name, value in components.items() if value is not None}
        self.per_rank = frozenset(per_rank) & self.components.keys()
        self._gradients = GradientWatch(c for c in self.components.values() if isinstance(c, torch.optim.Optimizer))

    def accumulating(self) -> bool:
        """Whether an optimizer of this state has gradients it has not stepped with: between the micro-batches of
        an accumulated step, where a checkpoint (which holds no gradients) would not resume exactly."""
        return self._gradients.accumulating()

    def state_dict(self, part: str = "all") -> dict[str, Any]:
        """Live (not copied) state of the ``shared`` components, the ``rank`` ones, or ``all``."""
        if part not in ("all", "shared", "rank"):
            raise ValueError(f"part must be 'all', 'shared' or 'rank', not {part!r}")
        return {
            name: component.state_dict()
            for name, component in self.components.items()
            if part == "all" or (name in self.per_rank) == (part == "rank")
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load every component found in ``state``. A component ``state`` lacks keeps its current value, with
        a warning; a component only ``state`` has is an error (the checkpoint is of another program).

        Every component is checked first (see ``compat``): IncompatibleCheckpoint names each mismatch (a
        parameter of another shape, ...) and nothing is loaded."""
        unknown = state.keys() - self.components.keys()
        if unknown:
            raise UnknownComponents(f"the checkpoint has components this state does not: {sorted(unknown)}")
        problems = [problem for name, value in state.items() for problem in mismatches(name, self.components[name], value)]
        if problems:
            listed = "\n  ".join(problems)
            raise IncompatibleCheckpoint(f"the checkpoint does not fit this training state; nothing was loaded:\n  {listed}")
        missing = self.components.keys() - state.keys()
        if missing:
            warnings.warn(
                f"the checkpoint has no state for {sorted(missing)}: they keep their current values", stacklevel=3
            )
        for loaded, (name, value) in enumerate(state.items()):
            component = self.components[name]
            if isinstance(component, torch.nn.Module) and isinstance(value, Mapping):
                adopt_storages(component, value, state)  # no copy where none is needed (see ``adopt``)
            try:
                component.load_state_dict(value)
            except CheckpointError:
                raise
            except Exception as error:
                raise _failed_load(name, component, error, list(state)[:loaded]) from error


def _failed_load(name: str, component: Any, error: Exception, loaded: list[str]) -> IncompatibleCheckpoint:
    """A component's own load refusing what the checks let through: another optimizer class than the one saved (the
    shapes fit, and Adam's load raises KeyError: 'step' on SGD's state), a component's own refusal, ..."""
    return IncompatibleCheckpoint(
        f"the checkpoint does not fit this training state: {name} ({type(component).__name__}) could not load its "
        f"state ({type(error).__name__}: {error}); is it of the class the checkpoint was saved with? "
        f"already loaded: {loaded}"
    )


def torch_state(*, rng: bool = True, per_rank: Iterable[str] = (RNG_COMPONENT,), **components: Any) -> TrainingState:
    """The state of a PyTorch training run, e.g. ``torch_state(model=m, optimizer=o, scheduler=s, sampler=smp)``.

    Every keyword names a component: a module, optimizer, LR scheduler, GradScaler, ResumableSampler, any
    object with ``state_dict``/``load_state_dict``, or a dict of extra user values (picklable objects or
    tensors; restored in place, a tensor into the one the dict holds). ``None`` components are skipped. With ``rng`` the global Python, NumPy and
    torch RNG states are saved as the ``rng`` component.
    """
    if not isinstance(rng, bool):
        raise TypeError(f"rng must be True or False (it is not a component name), got {type(rng).__name__}")
    if rng:
        components[RNG_COMPONENT] = RNGState()
    return TrainingState(components, per_rank=per_rank)
