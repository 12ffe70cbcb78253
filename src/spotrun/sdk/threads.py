"""Work handed to a helper thread that still gets done while the interpreter exits.

The interpreter's exit joins the Checkpointer's writer thread, so that the save in flight is committed. But once the
exit has begun, no ThreadPoolExecutor takes new work ("cannot schedule new futures after interpreter shutdown"), and
the writer hands its hashing and its part uploads to helper threads: the save in flight at a script's end failed. Here
such work is then done in the calling thread instead, one piece after another.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def submit(pool: ThreadPoolExecutor, action: Callable[..., T], *args: Any) -> Future[T]:
    """``pool.submit(action, *args)``; when the pool takes no more work because the interpreter is exiting, the
    action done here and now, its outcome in the future returned."""
    try:
        return pool.submit(action, *args)
    except RuntimeError as error:
        if "interpreter shutdown" not in str(error):
            raise
    done: Future[T] = Future()
    try:
        done.set_result(action(*args))
    except BaseException as failure:  # the caller's result() raises it, as a pool's future would
        done.set_exception(failure)
    return done
