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
_descriptors: set[int] = set()  # the folders open in this process to be locked: a forked child closes its copies
# Taken by a fork (os.register_at_fork) and around every open and close of a folder, so that no fork falls between
# a descriptor's open and its record (or record and close): the lock belongs to the open folder, and a copy the
# child did not know to close kept it locked. Reentrant: a lock collected (``__del__``) while its thread holds it.
_fork_guard = threading.RLock()
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
        fd = _open_folder(self.root)
        try:
            _lock_within(fd, wait)
        except BlockingIOError:
            _close_folder(fd)
            return False
        except OSError as error:
            if error.errno not in _CANNOT_LOCK:
                _close_folder(fd)
                raise
            _warn_unlockable(self.root, error)
        with _fork_guard:
            self._fd = fd
            _held.add(self)
        return True

    def release(self) -> None:
        with _fork_guard:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                _held.discard(self)
                _close_folder(fd)  # the last descriptor of the open folder: the kernel drops the lock

    def __del__(self) -> None:
        self.release()


def _open_folder(root: str) -> int:
    with _fork_guard:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        _descriptors.add(fd)
        return fd


def _close_folder(fd: int) -> None:
    with _fork_guard:
        _descriptors.discard(fd)
        os.close(fd)


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


def _before_fork() -> None:
    _fork_guard.acquire()


def _after_fork_in_parent() -> None:
    _fork_guard.release()


def _forget_in_child() -> None:
    """Close the child's copies of the folders' descriptors, not unlocking them (LOCK_UN would free the parent's)."""
    global _fork_guard
    for fd in _descriptors:
        with contextlib.suppress(OSError):
            os.close(fd)
    _descriptors.clear()
    for lock in list(_held):
        lock._fd = None
    _held.clear()
    _fork_guard = threading.RLock()  # the parent's is held by the fork: the child's one thread starts afresh


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_forget_in_child)
