"""The preemption flag: a signal only sets it; the training loop reads it at step boundaries.

The agent sends SIGTERM to the trainer's whole process group when a preemption notice arrives, so
DataLoader workers receive it too, and PyTorch's workers die of a SIGTERM that does not come from their
parent (the trainer then fails with "DataLoader worker exited unexpectedly"). Give every DataLoader with
workers ``worker_init_fn=spotrun.ignore_preemption_signals`` (or call it from your own worker_init_fn).
Processes forked from the trainer before that inherit the handler, which ignores the signal in any
process other than the one that installed it. A worker starts handling SIGTERM itself before its worker_init_fn
runs, though: start the workers (``iter(loader)``) inside ``with spotrun.preemption_signals_held():`` so that a
signal arriving meanwhile waits for the ignore (``spotrun.ResumableLoader`` does both). Workers that ignore SIGTERM
are killed at the trainer's exit, which would otherwise wait for them forever (``exit_guard``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from spotrun.sdk import exit_guard  # noqa: F401  (registers the exit handler that ends such workers)

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: the agent reads it as "preempted, resume me"
DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionFlag:
    """Set by a preemption signal (or by ``request``); never cleared by the SDK itself."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous: dict[int, Any] = {}
        self._owner_pid = os.getpid()
        self.signal_received: int | None = None

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        """Ask for a stop as if a preemption signal had arrived."""
        self._event.set()

    def clear(self) -> None:
        self._event.clear()
        self.signal_received = None

    def install(self, signals: Iterable[int] = DEFAULT_SIGNALS) -> None:
        """Route the given signals to this flag (idempotent); must run in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("preemption signal handlers can only be installed from the main thread")
        self._owner_pid = os.getpid()
        for signum in signals:
            if signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._handle)

    def hold(self, signals: Iterable[int] = DEFAULT_SIGNALS) -> dict[int, Any]:
        """Route the given signals to this flag alone for a while, whatever handles them now (a framework's handler
        that would act on the signal itself); the handlers they had, for giving them back. Main thread only."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("preemption signal handlers can only be installed from the main thread")
        self._owner_pid = os.getpid()
        held = {}
        for signum in signals:
            held[signum] = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, None)  # not chained: the handler held must not see the signal
        return held

    def uninstall(self) -> None:
        """Give the signals back to the handlers they had before ``install``."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner_pid:
            return  # a forked child (a DataLoader worker): the trainer decides when to stop
        self.signal_received = signum
        self._event.set()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)


def exit_preempted(signals: Iterable[int] = DEFAULT_SIGNALS, *, at_once: bool = False) -> NoReturn:
    """Exit with PREEMPTED_EXIT_CODE (75, "resume me") once the stop is saved. The preemption signals are ignored
    first: a second SIGTERM (the agent stopping every rank) must not kill the exit half-way and turn "saved, resume
    me" into a death by signal. ``at_once`` ends the process without the interpreter's teardown (``os._exit``, its
    output flushed): under torch.distributed on CPU, gloo has aborted ranks torn down by it (SIGABRT)."""
    if threading.current_thread() is threading.main_thread():
        ignore_preemption_signals(signals=signals)
    if at_once:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT_CODE)
    raise SystemExit(PREEMPTED_EXIT_CODE)


def ignore_preemption_signals(worker_id: int | None = None, signals: Iterable[int] = DEFAULT_SIGNALS) -> None:
    """Ignore the preemption signals in this process; usable as a DataLoader ``worker_init_fn``. Signals that
    `preemption_signals_held` held back in a process started inside it are dropped, and no longer held."""
    signals = tuple(signals)
    for signum in signals:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)


@contextmanager
def preemption_signals_held(signals: Iterable[int] = DEFAULT_SIGNALS) -> Iterator[None]:
    """Hold the preemption signals back in this thread for the block, and take them after it.

    Processes started inside inherit the hold. That closes a race in DataLoader workers: PyTorch's worker installs
    a SIGTERM handler that kills the worker for a SIGTERM from anyone but its parent, before our worker_init_fn
    ignores the signal; the agent's SIGTERM to the trainer's process group, arriving in that window, killed a worker
    and the trainer's next batch raised "DataLoader worker exited unexpectedly" instead of its checkpoint being saved.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, tuple(signals))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


preemption_flag = PreemptionFlag()
"""The process-wide flag every Checkpointer reads."""
