"""Whether gradients are accumulating: some parameter an optimizer of the state steps has received a gradient
(``backward``) since that optimizer's last step.

A checkpoint holds no gradients. Saved between the micro-batches of an accumulated step, it would resume with the
gradients summed so far gone, and the run would no longer end with the weights of one never stopped; so the
Checkpointer holds such a save back to the first step after the optimizer's (as spotrun's Lightning callback
does: it saves only once Lightning's global step has moved).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch


class GradientWatch:
    """Follows the parameters of ``optimizers``: marked at each gradient accumulated into them, cleared at their
    optimizer's step. Hooks only: nothing is read or copied at a step."""

    def __init__(self, optimizers: Iterable[torch.optim.Optimizer]) -> None:
        self._parameters: dict[int, weakref.ref[torch.Tensor]] = {}  # made once: a backward only adds an id
        self._pending: set[int] = set()
        watch = weakref.ref(self)  # the hooks must not keep a discarded state's watch alive
        for optimizer in optimizers:
            parameters = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
            optimizer.register_step_post_hook(lambda opt, _args, _kwargs: _call(watch, "stepped", opt))
            for parameter in parameters:
                self._parameters[id(parameter)] = weakref.ref(parameter)
                parameter.register_post_accumulate_grad_hook(lambda p: _call(watch, "accumulated", p))

    def accumulated(self, parameter: torch.Tensor) -> None:
        self._pending.add(id(parameter))

    def stepped(self, optimizer: torch.optim.Optimizer) -> None:
        self._pending.difference_update(id(p) for group in optimizer.param_groups for p in group["params"])

    def accumulating(self) -> bool:
        """A parameter holds a gradient its optimizer has not stepped with (one set to None since does not count:
        ``zero_grad`` after a step the GradScaler skipped)."""
        return any(
            (parameter := self._parameters[key]()) is not None and parameter.grad is not None for key in self._pending
        )


def _call(watch: weakref.ref[GradientWatch], method: str, argument: Any) -> None:
    target = watch()
    if target is not None:
        getattr(target, method)(argument)
