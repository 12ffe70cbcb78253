"""Preemption notice sources.

A source is anything with `name` and `poll() -> Notice | None`. `poll` must be cheap and must never
raise: a probe that fails (metadata service down, malformed answer) is "unknown" and returns None,
never a notice. Cloud sources (AWS IMDSv2 spot/instance-action, GCP `preempted`, Azure Scheduled
Events) are further classes with the same interface, added to `metadata_notice_sources`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Protocol

log = logging.getLogger(__name__)

LOCAL_METADATA_ENV_VAR = "SPOTRUN_LOCAL_METADATA"
INSTANCE_ACTION_PATH = ("spot", "instance-action")
RECLAIM_ACTIONS = frozenset({"terminate", "stop", "hibernate"})


@dataclass(frozen=True)
class Notice:
    source: str
    deadline: float | None  # unix seconds when the instance is reclaimed; None when unknown
    detail: str
    # the deadline is the agent's own grace after the notice arrived (a SIGTERM, the controller's stop), not a time
    # the cloud stated
    own_grace: bool = False


class NoticeSource(Protocol):
    name: str

    def poll(self) -> Notice | None: ...


def parse_iso_time(text: str) -> float:
    """Unix seconds of an ISO-8601 time; a time without zone is UTC (as EC2's metadata writes it)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


class LocalMetadataNotice:
    """The local provider's stand-in for EC2's metadata: `<root>/spot/instance-action`, JSON
    `{"action": "terminate", "time": "<ISO-8601>"}`, present only once the instance is to be reclaimed."""

    name = "local-metadata"

    def __init__(self, root: Path) -> None:
        self._path = root.joinpath(*INSTANCE_ACTION_PATH)
        self._warned_about: str | None = None

    def poll(self) -> Notice | None:
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._unknown(f"cannot read {self._path}: {exc}")
            return None
        try:
            action = json.loads(text)
            kind = action["action"]
            deadline = parse_iso_time(action["time"])
        except (ValueError, KeyError, TypeError) as exc:
            # Possibly a half-written file; the next poll sees the whole of it.
            self._unknown(f"malformed {self._path}: {exc!r}")
            return None
        if kind not in RECLAIM_ACTIONS:
            self._unknown(f"unknown action {kind!r} in {self._path}")
            return None
        return Notice(self.name, deadline, f"instance-action {kind} at {action['time']}")

    def _unknown(self, why: str) -> None:
        """Log why the probe is unknown, once per distinct reason."""
        if why != self._warned_about:
            log.warning("notice probe unknown: %s", why)
            self._warned_about = why
        return None


class SigtermNotice:
    """SIGTERM to the agent itself (Kubernetes eviction, a shutdown script), or SIGINT (a Ctrl-C, a stop signal set
    so): the trainer gets `grace` seconds counted from the signal's arrival."""

    name = "sigterm"
    signals = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, grace: float, clock: Callable[[], float] = time.time) -> None:
        self._grace = grace
        self._clock = clock
        self._received: tuple[float, str] | None = None  # when, and which signal

    def install(self) -> SigtermNotice:
        """Take over the signals; must be called from the main thread. SIGINT's default, a KeyboardInterrupt, would
        kill the trainer unsaved and leave the attempt's exit unreported; it is given back after the first SIGINT, so
        that a second Ctrl-C still ends an agent waiting on a controller that is gone."""
        for signum in self.signals:
            signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self.trigger(signal.Signals(signum).name)

    def trigger(self, signal_name: str = "SIGTERM") -> None:
        if self._received is None:
            self._received = (self._clock(), signal_name)

    def poll(self) -> Notice | None:
        received = self._received
        if received is None:
            return None
        received_at, signal_name = received
        return Notice(self.name, received_at + self._grace, f"{signal_name} received by the agent", own_grace=True)


def metadata_notice_sources(environ: Mapping[str, str] = os.environ) -> list[NoticeSource]:
    """The instance-metadata sources this instance has: local metadata when $SPOTRUN_LOCAL_METADATA is set, and
    the cloud's when $SPOTRUN_CLOUD (aws|gcp|azure) or an endpoint override names it (see `cloud_notices`).
    Nothing is probed here. SigtermNotice is added by the caller, who owns signal handling."""
    # Imported here: cloud_notices builds on this module's Notice.
    from spotrun.agent.cloud_notices import cloud_notice_sources

    sources: list[NoticeSource] = []
    local_root = environ.get(LOCAL_METADATA_ENV_VAR)
    if local_root:
        sources.append(LocalMetadataNotice(Path(local_root)))
    sources.extend(cloud_notice_sources(environ))
    return sources


def first_notice(sources: Sequence[NoticeSource]) -> Notice | None:
    for source in sources:
        try:
            notice = source.poll()
        except Exception:  # a buggy source is "unknown", never a reason to stop watching the others
            log.exception("notice source %s failed", source.name)
            continue
        if notice is not None:
            return notice
    return None


def sooner(held: Notice | None, new: Notice | None) -> Notice | None:
    """The notice to act on: ``new`` when it names a deadline before ``held``'s (or ``held`` named none)."""
    if held is None or new is None:
        return held or new
    if new.deadline is not None and (held.deadline is None or new.deadline < held.deadline):
        return new
    return held


class NoticeWatcher:
    """Polls every source each `interval` seconds; `wait` returns the first notice, `notice` the one with the
    soonest deadline so far, and `cloud_notice` the first the cloud stated (not a SIGTERM's or the controller's)."""

    def __init__(self, sources: Sequence[NoticeSource], interval: float) -> None:
        self._sources = list(sources)
        self._interval = interval
        self._notice: Notice | None = None
        self._cloud_notice: Notice | None = None
        self._arrived = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="spotrun-notices", daemon=True)

    @property
    def notice(self) -> Notice | None:
        return self._notice

    @property
    def cloud_notice(self) -> Notice | None:
        return self._cloud_notice

    def start(self) -> NoticeWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def wait(self, timeout: float | None = None) -> Notice | None:
        self._arrived.wait(timeout)
        return self._notice

    def _watch(self) -> None:
        """Every source, each interval, on after the first notice too: a later one may name a sooner deadline (the
        cloud's, after a SIGTERM's grace), and the stop and the final backup must keep to it."""
        while not self._stop.is_set():
            for source in self._sources:
                notice = first_notice([source])
                if notice is not None and not notice.own_grace and self._cloud_notice is None:
                    self._cloud_notice = notice
                if notice is None or sooner(self._notice, notice) is self._notice:
                    continue
                log.warning("preemption notice from %s: %s (deadline %s)", notice.source, notice.detail, notice.deadline)
                self._notice = notice
                self._arrived.set()
            self._stop.wait(self._interval)
