"""The Azure source against the fake Scheduled Events service: Preempt is a notice, other events are not."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from spotrun.agent.cloud_notices import AzurePreemptNotice, EarlyWarning

from .cloud_polling import refused_url


@pytest.fixture
def azure_source() -> Iterator[Callable[..., AzurePreemptNotice]]:
    sources: list[AzurePreemptNotice] = []

    def make(url: str, **options: object) -> AzurePreemptNotice:
        sources.append(AzurePreemptNotice(url, **options))  # type: ignore[arg-type]
        return sources[-1]

    yield make
    for source in sources:
        source.close()


def test_no_events_is_no_notice(azure, azure_source):
    assert azure_source(azure.url).poll() is None
    (request,) = azure.requests
    assert request.query == {"api-version": "2020-07-01"} and request.headers["metadata"] == "true"


def test_preempt_for_this_vm_is_a_notice_with_not_before_as_deadline(azure, azure_source):
    event = azure.schedule_event("Preempt", resources=["other-vm", "Spot-VM-1"], not_before_in=30)
    notice = azure_source(azure.url, vm_name="spot-vm-1").poll()
    assert notice is not None
    assert (notice.source, notice.deadline) == ("azure-scheduled-events", event.not_before)
    assert event.event_id in notice.detail


def test_preempt_for_another_vm_is_no_notice(azure, azure_source):
    azure.schedule_event("Preempt", resources=["other-vm"])
    assert azure_source(azure.url, vm_name="spot-vm-1").poll() is None


def test_preempt_for_any_vm_is_a_notice_when_this_vms_name_is_unknown(azure, azure_source):
    event = azure.schedule_event("Preempt", resources=["whatever-vm"])
    notice = azure_source(azure.url).poll()
    assert notice is not None and notice.deadline == event.not_before


@pytest.mark.parametrize("event_type", ["Reboot", "Redeploy", "Freeze", "Terminate"])
def test_other_event_types_are_early_warnings_not_preemptions(azure, azure_source, event_type):
    warnings: list[EarlyWarning] = []
    source = azure_source(azure.url, on_early_warning=warnings.append)
    azure.schedule_event(event_type)
    for _ in range(3):
        assert source.poll() is None
    assert len(warnings) == 1 and event_type in warnings[0].detail
    assert warnings[0].source == "azure-scheduled-events" and warnings[0].kind == event_type


def test_preempt_beside_other_events_is_a_notice(azure, azure_source):
    azure.schedule_event("Freeze")
    event = azure.schedule_event("Preempt", not_before_in=45)
    notice = azure_source(azure.url).poll()
    assert notice is not None and notice.deadline == event.not_before


def test_acknowledging_is_off_unless_asked(azure, azure_source):
    azure.schedule_event("Preempt")
    assert azure_source(azure.url).poll() is not None
    assert azure.acknowledged == []


def test_acknowledge_approves_the_preempt_event_once_the_instance_may_go_not_when_seen(azure, azure_source):
    """Approved as it was first seen, the event let Azure evict the VM before the trainer had saved."""
    event = azure.schedule_event("Preempt")
    source = azure_source(azure.url, acknowledge=True)
    assert source.poll() is not None
    assert source.poll() is not None
    assert azure.acknowledged == []
    source.instance_may_go()
    source.instance_may_go()
    assert azure.acknowledged == [event.event_id]


def test_without_acknowledge_the_instance_going_approves_nothing(azure, azure_source):
    azure.schedule_event("Preempt")
    source = azure_source(azure.url)
    assert source.poll() is not None
    source.instance_may_go()
    assert azure.acknowledged == []


def test_with_no_preempt_seen_the_instance_going_approves_nothing(azure, azure_source):
    azure.schedule_event("Freeze")
    source = azure_source(azure.url, acknowledge=True)
    assert source.poll() is None
    source.instance_may_go()
    assert azure.acknowledged == []


def test_a_started_preempt_without_not_before_is_a_notice_without_deadline(azure, azure_source):
    azure.schedule_event("Preempt")
    approving = azure_source(azure.url, acknowledge=True)
    approving.poll()
    approving.instance_may_go()  # starts the event: NotBefore turns blank
    notice = azure_source(azure.url).poll()
    assert notice is not None and notice.deadline is None


@pytest.mark.parametrize("breakage", ["fail_with_status", "drop_connections", "answer_garbage"])
def test_a_broken_service_is_unknown_never_a_notice(azure, azure_source, breakage):
    event = azure.schedule_event("Preempt")
    getattr(azure, breakage)()
    source = azure_source(azure.url)
    assert source.poll() is None
    azure.repair()
    notice = source.poll()
    assert notice is not None and notice.deadline == event.not_before


def test_connection_refused_is_unknown(azure_source):
    assert azure_source(refused_url()).poll() is None
