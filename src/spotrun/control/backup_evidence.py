"""An instance's last sign of life in its job's checkpoint store: the newest backup its agent marked there.

The agent rewrites its attempt's mark after each backup (`sdk.backup_marks`), and goes on doing so while the
controller, and with it the agents' API, is down. So an instance gone without an end its cloud states ran at least
until its newest mark, heartbeats or not (`controller._gone_at`). The store is read as the agent reads it, through
fsspec, with the controller's own credentials, once per such attempt; one that cannot be read in time (no
credentials, a bucket gone, a store that hangs) gives no evidence, and says so in one line.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from spotrun.sdk.backup_marks import BackupWriter, mark_written_at
from spotrun.sdk.locations import url_to_fs

log = logging.getLogger("spotrun.controller")


def newest_backup_at(store_url: str | None, writer: BackupWriter, timeout: float,
                     storage_options: dict[str, Any] | None = None) -> float | None:
    """The store's time (unix seconds, the store's clock) of the writer's newest backup in `store_url`; None when
    the attempt marked none there, or the store could not be read within `timeout` seconds."""
    if not store_url:
        return None
    answer: list[float | None | Exception] = []

    def look() -> None:
        try:
            fs, root = url_to_fs(store_url, storage_options)
            answer.append(mark_written_at(fs, root, writer))
        except Exception as error:  # fsspec's backends raise their own kinds
            answer.append(error)

    # a thread of its own: a store call that hangs past its client's timeouts must not hold the tick
    looking = threading.Thread(target=look, name="spotrun-backup-lookup", daemon=True)
    looking.start()
    looking.join(timeout)
    which = f"attempt {writer.attempt_id}'s backups in {store_url}"
    if not answer:
        log.warning("cannot look for %s: no answer within %.0f s; billed without them", which, timeout)
        return None
    found = answer[0]
    if isinstance(found, Exception):
        log.warning("cannot look for %s (%s: %s); billed without them", which, type(found).__name__, found)
        return None
    log.info("%s: %s", which, "none found" if found is None else f"the newest written at {found:.0f}")
    return found
