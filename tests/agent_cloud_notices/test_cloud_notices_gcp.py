"""The GCP source against the fake GCE metadata server: preempted, maintenance-event, long-polls, trust."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from fakes import FakeGceMetadata
from fakes.fake_gce_metadata import PREEMPTED_KEY

from spotrun.agent.cloud_notices import EarlyWarning, GcpPreemptionNotice

from .cloud_polling import poll_for_notice, refused_url, wait_until

LONG_POLL_SECONDS = 30.0  # far longer than any test waits: a prompt answer is the long-poll returning on a change


@pytest.fixture
def gcp_source() -> Iterator[Callable[..., GcpPreemptionNotice]]:
    sources: list[GcpPreemptionNotice] = []

    def make(url: str, **options: object) -> GcpPreemptionNotice:
        options = {"wait_seconds": LONG_POLL_SECONDS, "retry_seconds": 0.05, **options}
        sources.append(GcpPreemptionNotice(url, **options))  # type: ignore[arg-type]
        return sources[-1]

    yield make
    for source in sources:
        source.close()


def following(gce: FakeGceMetadata, source: GcpPreemptionNotice) -> GcpPreemptionNotice:
    """Start the source and wait until both keys are being long-polled (both first answers are in)."""
    source.poll()
    wait_until(lambda: gce.long_polls("instance/preempted") >= 1 and gce.long_polls("instance/maintenance-event") >= 1)
    return source


def test_not_preempted_is_no_notice(gce, gcp_source):
    source = following(gce, gcp_source(gce.url))
    assert source.poll() is None


def test_long_poll_returns_promptly_when_preempted_flips(gce, gcp_source):
    source = following(gce, gcp_source(gce.url))
    flipped_at = gce.preempt()
    notice = poll_for_notice(source, timeout=3.0)
    seen_after = time.time() - flipped_at
    assert seen_after < 3.0  # far less than the long-poll's 30 s: the waiting request answered the change
    assert notice.source == "gcp-metadata"
    assert flipped_at + 30 <= notice.deadline <= flipped_at + 30 + seen_after  # type: ignore[operator]
    assert gce.request_count("/computeMetadata/v1/" + PREEMPTED_KEY) <= 3  # one plain GET, then long-polls
    assert all(r.headers["metadata-flavor"] == "Google" for r in gce.requests)


def test_already_preempted_at_start_is_a_notice(gce, gcp_source):
    gce.preempt()
    started = time.time()
    notice = poll_for_notice(gcp_source(gce.url), timeout=2.0)
    assert started + 30 <= notice.deadline <= time.time() + 30  # type: ignore[operator]


def test_terminate_on_host_maintenance_is_a_notice(gce, gcp_source):
    source = following(gce, gcp_source(gce.url))
    changed_at = gce.set_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE")
    notice = poll_for_notice(source, timeout=2.0)
    assert "TERMINATE_ON_HOST_MAINTENANCE" in notice.detail
    assert changed_at + 60 <= notice.deadline <= changed_at + 61  # type: ignore[operator]


def test_a_preemption_after_a_host_maintenance_notice_brings_the_deadline_forward(gce, gcp_source):
    """The source kept its first notice: the maintenance event's 60 s stood when `preempted` said 30."""
    source = following(gce, gcp_source(gce.url))
    gce.set_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE")
    maintenance = poll_for_notice(source, timeout=2.0)
    preempted_at = gce.preempt()
    wait_until(lambda: source.poll() is not maintenance)
    notice = source.poll()
    assert notice.detail == "GCE instance/preempted is TRUE"
    assert preempted_at + 30 <= notice.deadline < maintenance.deadline  # type: ignore[operator]


def test_live_migration_is_an_early_warning_not_a_notice(gce, gcp_source):
    warnings: list[EarlyWarning] = []
    source = following(gce, gcp_source(gce.url, on_early_warning=warnings.append))
    gce.set_maintenance_event("MIGRATE_ON_HOST_MAINTENANCE")
    wait_until(lambda: source.poll() is None and warnings)
    for _ in range(3):
        assert source.poll() is None
    assert warnings == [EarlyWarning("gcp-metadata", "GCE maintenance-event MIGRATE_ON_HOST_MAINTENANCE", None, "maintenance MIGRATE_ON_HOST_MAINTENANCE")]


def test_an_answer_without_the_flavor_header_is_not_trusted(gce, gcp_source):
    gce.omit_flavor_header()
    gce.preempt()
    source = gcp_source(gce.url)
    source.poll()
    wait_until(lambda: gce.request_count("/computeMetadata/v1/" + PREEMPTED_KEY) >= 3)  # retried, never trusted
    assert source.poll() is None
    gce.omit_flavor_header(False)
    poll_for_notice(source, timeout=2.0)


@pytest.mark.parametrize("breakage", ["fail_with_status", "drop_connections", "answer_garbage"])
def test_a_broken_server_is_unknown_never_a_notice(gce, gcp_source, breakage):
    gce.preempt()
    getattr(gce, breakage)()
    source = gcp_source(gce.url)
    source.poll()
    wait_until(lambda: gce.request_count("/computeMetadata/v1/" + PREEMPTED_KEY) >= 3)
    assert source.poll() is None
    gce.repair()
    poll_for_notice(source, timeout=2.0)


def test_breaking_during_a_long_poll_is_unknown(gce, gcp_source):
    source = following(gce, gcp_source(gce.url))
    gce.fail_with_status(503)
    gce.preempt()  # ends the waiting long-poll; its answer and the retries are all 503
    wait_until(lambda: gce.request_count("/computeMetadata/v1/" + PREEMPTED_KEY) >= 4)
    assert source.poll() is None


def test_connection_refused_is_unknown(gcp_source):
    source = gcp_source(refused_url())
    for _ in range(5):
        assert source.poll() is None
        time.sleep(0.05)


def test_an_unknown_maintenance_event_is_unknown(gce, gcp_source):
    warnings: list[EarlyWarning] = []
    source = following(gce, gcp_source(gce.url, on_early_warning=warnings.append))
    gce.set_maintenance_event("SOMETHING_NEW")
    wait_until(lambda: gce.long_polls("instance/maintenance-event") >= 2)
    assert source.poll() is None
    assert warnings == []


def test_an_unknown_preempted_value_does_not_hide_a_host_maintenance_notice(gce, gcp_source):
    """`preempted` answering something neither TRUE nor FALSE made the whole probe unknown: the 60 s notice of a
    TERMINATE_ON_HOST_MAINTENANCE, a good answer of the other key, was never acted on."""
    source = following(gce, gcp_source(gce.url))
    gce.set_value(PREEMPTED_KEY, "SOMETHING_NEW")
    gce.set_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE")
    notice = poll_for_notice(source, timeout=2.0)
    assert "TERMINATE_ON_HOST_MAINTENANCE" in notice.detail
