"""Whether gradients are accumulating: some parameter an optimizer of the state steps has received a gradient
(``backward``) since that optimizer's last step.

A checkpoint holds no gradients. Saved between the micro-batches of an accumulated step, it would resume with the
gradients summed so far gone, and the run would no longer end with the weights of one never stopped; so the
Checkpointer holds such a save back to the first step after the optimizer's (as spotrun's Lightning callback
does: it saves only once Lightning's global step has moved).

The hold ends once every optimizer that had gradients pending when it began has stepped since, even if it has some
pending again: in a GAN or actor-critic loop the second optimizer's loss leaves gradients on the first one's
parameters at every step, which its next ``zero_grad`` discards unread. Held until none were pending, such a run
never saved, nor stopped at a notice.
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
        self._owner: dict[int, int] = {}  # parameter id -> the id of the optimizer that steps it
        self._steps: dict[int, int] = {}  # optimizer id -> steps taken
        self._pending: set[int] = set()
        self._hold: dict[int, int] | None = None  # while held: each optimizer pending then -> its steps then
        watch = weakref.ref(self)  # the hooks must not keep a discarded state's watch alive
        for optimizer in optimizers:
            parameters = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
            optimizer.register_step_post_hook(lambda opt, _args, _kwargs: _call(watch, "stepped", opt))
            self._steps[id(optimizer)] = 0
            for parameter in parameters:
                self._parameters[id(parameter)] = weakref.ref(parameter)
                self._owner[id(parameter)] = id(optimizer)
                parameter.register_post_accumulate_grad_hook(lambda p: _call(watch, "accumulated", p))

    def accumulated(self, parameter: torch.Tensor) -> None:
        self._pending.add(id(parameter))

    def stepped(self, optimizer: torch.optim.Optimizer) -> None:
        self._pending.difference_update(id(p) for group in optimizer.param_groups for p in group["params"])
        self._steps[id(optimizer)] = self._steps.get(id(optimizer), 0) + 1

    def accumulating(self) -> bool:
        """A parameter holds a gradient its optimizer has not stepped with (one set to None since does not count:
        ``zero_grad`` after a step the GradScaler skipped), and not every optimizer pending when this began to hold
        has stepped since (the module's note)."""
        pending = {
            self._owner[key] for key in self._pending
            if (parameter := self._parameters[key]()) is not None and parameter.grad is not None
        }
        if not pending:
            self._hold = None
            return False
        if self._hold is None:
            self._hold = {}
        for optimizer in pending - self._hold.keys():  # pending since the hold began: it must step too
            self._hold[optimizer] = self._steps[optimizer]
        if all(self._steps[optimizer] > steps for optimizer, steps in self._hold.items()):
            self._hold = None  # each has stepped since: what is pending now is a new round's, not summed across it
            return False
        return True


def _call(watch: weakref.ref[GradientWatch], method: str, argument: Any) -> None:
    target = watch()
    if target is not None:
        getattr(target, method)(argument)
