"""One writer per checkpoint folder on a local (or mounted) disk: an exclusive ``flock`` on the folder itself, taken
by a Checkpointer's first save and held until it closes.

Two writers on one folder (a script started twice, an old attempt still saving while a new one starts) destroy each
other's work: they share the staging folder of a step, so one commits the other's half-written files, and each one's
pruning and restore remove the other's checkpoints and its save in flight. The lock is the kernel's: a writer that
dies (SIGKILL, a preempted machine) releases it at once, so no stale lock ever blocks a resume, and the folder holds
no lock file. It belongs to the open folder, so two Checkpointers of one process are told apart too; a forked child
(a DataLoader worker) drops its copy, so that it does not hold the folder after its parent died.

Where the filesystem cannot lock a folder (NFS emulates ``flock`` with locks that need a file open for writing), a
second writer is not detected, and the process says so once for each such folder. Neither is it on an object store,
which has no lock: fsspec offers no create-if-absent, and a lock object left by a writer killed with its machine (the
preemption this is all about) would block every resume unless it expired, which takes clocks and heartbeats that
cannot tell a slow writer from a dead one. The Trainer and Lightning callbacks hold the folder the same way, from
their first save to the end of training.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
import weakref

log = logging.getLogger(__name__)

_RETRY_SECONDS = 0.05
_CANNOT_LOCK = (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)

_held: weakref.WeakSet[WriterLock] = weakref.WeakSet()
_warned: set[str] = set()  # the folders this process has said it cannot lock
_warned_guard = threading.Lock()  # a restore in the main thread and a save in the writer thread may both ask


class WriterLock:
    """The writer's lock on the checkpoint folder ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait: float = 0.0) -> bool:
        """Take the lock, trying for up to `wait` seconds; False while another holds it. Where the folder cannot be
        locked it counts as taken, with a warning."""
        if self._fd is not None:
            return True
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _lock_within(fd, wait)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as error:
            if error.errno not in _CANNOT_LOCK:
                os.close(fd)
                raise
            _warn_unlockable(self.root, error)
        self._fd = fd
        _held.add(self)
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            _held.discard(self)
            os.close(fd)  # the last descriptor of the open folder: the kernel drops the lock

    def __del__(self) -> None:
        self.release()

    def _forget(self) -> None:
        """In a forked child: close its copy of the descriptor without unlocking (LOCK_UN would free the parent's)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _warn_unlockable(root: str, error: OSError) -> None:
    """Once per folder and process: every restore and every writer's first save tries the lock again."""
    with _warned_guard:
        if root in _warned:
            return
        _warned.add(root)
    log.warning("%s cannot be locked (%s): a second writer here would go unnoticed", root, error)


def _lock_within(fd: int, wait: float) -> None:
    """flock(LOCK_EX) on `fd`, tried until `wait` seconds have passed (BlockingIOError then)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(_RETRY_SECONDS)


def _forget_in_child() -> None:
    for lock in list(_held):
        lock._forget()
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)
