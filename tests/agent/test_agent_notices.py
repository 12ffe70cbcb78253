"""Notice sources: a failed or malformed probe is "unknown" (None), never a notice."""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest

from spotrun.agent.notices import (
    LocalMetadataNotice,
    Notice,
    NoticeWatcher,
    SigtermNotice,
    metadata_notice_sources,
    parse_iso_time,
)


def write_action(root: Path, text: str) -> None:
    (root / "spot").mkdir(parents=True, exist_ok=True)
    (root / "spot" / "instance-action").write_text(text)


def test_local_metadata_without_action_file_is_no_notice(tmp_path):
    assert LocalMetadataNotice(tmp_path).poll() is None


def test_local_metadata_action_is_a_notice_with_its_deadline(tmp_path):
    write_action(tmp_path, json.dumps({"action": "terminate", "time": "2031-05-04T03:02:01Z"}))
    notice = LocalMetadataNotice(tmp_path).poll()
    assert notice == Notice(
        "local-metadata",
        datetime(2031, 5, 4, 3, 2, 1, tzinfo=timezone.utc).timestamp(),
        "instance-action terminate at 2031-05-04T03:02:01Z",
    )


@pytest.mark.parametrize(
    "content",
    ['{"action": "terminate", "ti', '{"action": "terminate"}', '{"action": "reboot", "time": "2031-05-04T03:02:01Z"}',
     '{"action": "terminate", "time": "next tuesday"}', "[]"],
)
def test_malformed_or_unknown_action_is_unknown_not_a_notice(tmp_path, content):
    write_action(tmp_path, content)
    assert LocalMetadataNotice(tmp_path).poll() is None


def test_unreadable_action_path_is_unknown(tmp_path):
    (tmp_path / "spot" / "instance-action").mkdir(parents=True)  # a folder where the file should be
    assert LocalMetadataNotice(tmp_path).poll() is None


def test_time_without_zone_is_utc():
    assert parse_iso_time("2031-05-04T03:02:01") == parse_iso_time("2031-05-04T03:02:01+00:00")


def test_sigterm_notice_deadline_counts_from_the_signal():
    source = SigtermNotice(grace=30.0, clock=lambda: 1000.0)
    assert source.poll() is None
    source.trigger()
    assert source.poll() == Notice("sigterm", 1030.0, "SIGTERM received by the agent", own_grace=True)


def test_sigterm_handler_records_the_signal():
    previous = {signum: signal.getsignal(signum) for signum in SigtermNotice.signals}
    try:
        source = SigtermNotice(grace=5.0).install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert source.poll() is not None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_sigint_handler_records_a_notice_naming_the_signal():
    """SIGINT was left to Python's KeyboardInterrupt, which killed the trainer unsaved."""
    previous = {signum: signal.getsignal(signum) for signum in SigtermNotice.signals}
    try:
        source = SigtermNotice(grace=5.0).install()
        os.kill(os.getpid(), signal.SIGINT)
        notice = source.poll()
        assert notice is not None and notice.detail == "SIGINT received by the agent"
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C ends the agent, as before
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_metadata_sources_follow_the_environment(tmp_path):
    assert metadata_notice_sources({}) == []
    (source,) = metadata_notice_sources({"SPOTRUN_LOCAL_METADATA": str(tmp_path)})
    assert isinstance(source, LocalMetadataNotice)


class BrokenSource:
    name = "broken"

    def poll(self) -> Notice | None:
        raise RuntimeError("metadata service exploded")


def test_watcher_survives_a_broken_source_and_reports_the_first_notice(tmp_path):
    sigterm = SigtermNotice(grace=1.0, clock=lambda: 50.0)
    watcher = NoticeWatcher([BrokenSource(), LocalMetadataNotice(tmp_path), sigterm], interval=0.01).start()
    try:
        assert watcher.wait(0.1) is None
        sigterm.trigger()
        assert watcher.wait(2.0) == Notice("sigterm", 51.0, "SIGTERM received by the agent", own_grace=True)
    finally:
        watcher.stop()


def test_a_later_notice_with_a_sooner_deadline_becomes_the_one_acted_on():
    """A SIGTERM with a short grace after the cloud's notice with 30 s left: the watcher kept the first, and the
    agent stopped and backed up by a deadline already past."""
    import threading
    import time

    from spotrun.agent.notices import Notice, NoticeWatcher, sooner

    now = time.time()
    cloud, signal_notice = Notice("aws", now + 30, "terminate"), Notice("signal", now + 1, "SIGTERM")
    assert sooner(cloud, signal_notice) is signal_notice and sooner(signal_notice, cloud) is signal_notice
    assert sooner(cloud, Notice("signal", None, "no deadline")) is cloud and sooner(None, cloud) is cloud
    later = threading.Event()

    class Source:
        def __init__(self, name, notice, after=None):
            self.name, self._notice, self._after = name, notice, after

        def poll(self):
            return self._notice if self._after is None or self._after.is_set() else None

    watcher = NoticeWatcher([Source("aws", cloud), Source("signal", signal_notice, later)], interval=0.01).start()
    try:
        assert watcher.wait(5) is cloud
        later.set()
        deadline = time.monotonic() + 5
        while watcher.notice is not signal_notice:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        watcher.stop()
