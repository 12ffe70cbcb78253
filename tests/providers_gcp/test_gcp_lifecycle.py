"""describe / terminate / list / find / zones / preempt through the real REST transport against the fake API."""

from __future__ import annotations

import time

import pytest
from fakes_gcp import loopback_only
from google.auth.credentials import AnonymousCredentials

from spotrun.providers.base import Provider
from spotrun.providers.gcp import GcpProvider

ZONE = "us-central1-a"


def name_of(info) -> str:
    return info.instance_id.split("/", 1)[1]


def test_it_is_a_provider(provider):
    assert isinstance(provider, Provider)
    assert provider.name == "gcp"


def test_zones_offering_a_machine_type_that_are_up(provider):
    assert provider.zones("n1-standard-8") == ["us-central1-a", "us-central1-b"]  # us-central1-c is DOWN
    assert provider.zones("e2-small") == ["europe-west4-a", "us-central1-a"]
    assert provider.zones("a3-megagpu-8g") == []


def test_zones_are_listed_once_for_many_placements(provider, cloud):
    assert [provider.zones("n1-standard-8") for _ in range(3)] == [["us-central1-a", "us-central1-b"]] * 3
    assert len(cloud.requests_to("GET", "/aggregated/machineTypes")) == 1
    assert len(cloud.requests_to("GET", "/zones")) == 1


def test_zones_read_every_page(provider, cloud):
    cloud.page_size = 1
    assert provider.zones("n1-standard-8") == ["us-central1-a", "us-central1-b"]


def test_describe_a_running_instance(provider, launch_request):
    launched = provider.launch(launch_request())
    info = provider.describe(launched.instance_id)
    assert (info.state, info.reclaimed, info.market) == ("running", False, "spot")
    assert info.detail["gce_status"] == "RUNNING"


def test_provisioning_is_pending(provider, launch_request, cloud):
    launched = provider.launch(launch_request())
    cloud.instances[(ZONE, name_of(launched))]["status"] = "STAGING"
    assert provider.describe(launched.instance_id).state == "pending"


def test_terminate_deletes_and_is_idempotent(provider, launch_request, cloud):
    launched = provider.launch(launch_request())

    provider.terminate(launched.instance_id)
    provider.terminate(launched.instance_id)  # 404 now: fine

    assert cloud.instances == {}
    assert len(cloud.requests_to("DELETE", f"/instances/{name_of(launched)}")) == 2
    info = provider.describe(launched.instance_id)
    assert (info.state, info.reclaimed) == ("terminated", False)


def test_an_instance_being_deleted_is_terminated_not_reclaimed(provider, launch_request, cloud):
    cloud.deletes_at_once = False
    launched = provider.launch(launch_request())
    provider.terminate(launched.instance_id)

    info = provider.describe(launched.instance_id)
    assert (info.state, info.reclaimed, info.detail["gce_status"]) == ("terminated", False, "STOPPING")


def test_a_preempted_spot_vm_that_gce_deleted_is_reclaimed(provider, launch_request, cloud):
    launched = provider.launch(launch_request())
    preemption = cloud.preempt(ZONE, name_of(launched))
    assert cloud.instances == {}  # the termination action was DELETE

    info = provider.describe(launched.instance_id)

    assert (info.state, info.reclaimed, info.market) == ("terminated", True, "spot")
    assert info.terminated_at is not None
    (listing,) = cloud.requests_to("GET", f"/zones/{ZONE}/operations")
    assert listing.query["filter"] == 'operationType = "compute.instances.preempted"'
    assert preemption["operationType"] == "compute.instances.preempted"


def test_a_spot_vm_preempted_and_deleted_before_the_launch_looks_is_launched_and_reclaimed(
    provider, launch_request, cloud, monkeypatch
):
    wait = provider._wait

    def wait_then_preempt(operation, zone, what):  # GCE preempts, and deletes, the VM as its insert is done
        wait(operation, zone, what)
        cloud.preempt(zone, what.removeprefix("insert of "))

    monkeypatch.setattr(provider, "_wait", wait_then_preempt)

    launched = provider.launch(launch_request())

    assert cloud.instances == {}
    assert (launched.state, launched.reclaimed, launched.market) == ("terminated", True, "spot")
    assert (launched.instance_type, launched.client_token) == ("n1-standard-8", "sr-7-0123456789abcdef")
    assert provider.describe(launched.instance_id).reclaimed


def test_a_spot_vm_preempted_before_the_launch_looks_is_billed_from_its_insert(
    provider, launch_request, cloud, monkeypatch
):
    """Answered with no launch time, the attempt was taken as started once the answer came, after the VM's
    preemption: it ended before it started, billed 0 s for a VM GCE had billed."""
    wait = provider._wait

    def wait_then_preempt(operation, zone, what):
        wait(operation, zone, what)
        cloud.preempt(zone, what.removeprefix("insert of "))

    monkeypatch.setattr(provider, "_wait", wait_then_preempt)
    before = time.time()
    launched = provider.launch(launch_request())
    assert launched.launched_at is not None and launched.terminated_at is not None
    assert before - 1 <= launched.launched_at <= launched.terminated_at


def test_a_vm_deleted_by_someone_before_the_launch_looks_is_launched_and_terminated(
    provider, launch_request, cloud, monkeypatch
):
    wait = provider._wait

    def wait_then_delete(operation, zone, what):
        wait(operation, zone, what)
        del cloud.instances[(zone, what.removeprefix("insert of "))]

    monkeypatch.setattr(provider, "_wait", wait_then_delete)

    launched = provider.launch(launch_request(market="on-demand"))

    assert (launched.state, launched.reclaimed, launched.market) == ("terminated", False, "on-demand")


def test_a_preempted_preemptible_vm_that_stays_terminated_is_reclaimed(make_provider, launch_request, cloud):
    provider = make_provider(preemptible=True)
    launched = provider.launch(launch_request())
    cloud.preempt(ZONE, name_of(launched))

    info = provider.describe(launched.instance_id)

    assert (info.state, info.reclaimed, info.detail["gce_status"]) == ("terminated", True, "TERMINATED")
    assert info.instance_type == "n1-standard-8"


def test_a_spot_vm_someone_stopped_is_terminated_not_reclaimed(make_provider, launch_request, cloud):
    provider = make_provider(preemptible=True)
    launched = provider.launch(launch_request())
    cloud.stop(ZONE, name_of(launched))

    info = provider.describe(launched.instance_id)
    assert (info.state, info.reclaimed) == ("terminated", False)
    assert info.terminated_at is not None


def test_another_instances_preemption_does_not_count(provider, launch_request, cloud):
    mine = provider.launch(launch_request(token="sr-1-aaaa"))
    other = provider.launch(launch_request(token="sr-2-bbbb"))
    cloud.preempt(ZONE, name_of(other))
    provider.terminate(mine.instance_id)

    assert provider.describe(mine.instance_id).reclaimed is False
    assert provider.describe(other.instance_id).reclaimed is True


def test_preempt_simulates_a_maintenance_event_which_reclaims_a_spot_vm(provider, launch_request, cloud):
    launched = provider.launch(launch_request())

    provider.preempt(launched.instance_id, notice_seconds=30)

    assert cloud.requests_to("POST", f"/instances/{name_of(launched)}/simulateMaintenanceEvent")
    info = provider.describe(launched.instance_id)
    assert (info.state, info.reclaimed) == ("terminated", True)


def test_a_failed_get_is_unknown_never_terminated(provider, launch_request, cloud):
    launched = provider.launch(launch_request())
    cloud.fail_next("GET", f"/instances/{name_of(launched)}", 403, "forbidden", "Required 'compute.instances.get' permission")

    info = provider.describe(launched.instance_id)

    assert info.state == "unknown"
    assert "compute.instances.get" in info.detail["error"]
    assert provider.describe(launched.instance_id).state == "running"  # the next look works


def test_a_get_that_keeps_failing_is_unknown_within_the_call_timeout(make_provider, launch_request, cloud):
    provider = make_provider(call_timeout=0.5)
    launched = provider.launch(launch_request())
    cloud.fail_next("GET", f"/instances/{name_of(launched)}", 503, "backendError", "unavailable", times=1000)

    assert provider.describe(launched.instance_id).state == "unknown"


def test_a_failed_look_at_the_operations_is_unknown(provider, launch_request, cloud):
    launched = provider.launch(launch_request())
    cloud.preempt(ZONE, name_of(launched))
    cloud.fail_next("GET", f"/zones/{ZONE}/operations", 403, "forbidden", "Required 'compute.zoneOperations.list' permission")

    assert provider.describe(launched.instance_id).state == "unknown"
    assert provider.describe(launched.instance_id).reclaimed is True


def test_a_transient_get_failure_is_retried(provider, launch_request, cloud):
    launched = provider.launch(launch_request())
    cloud.fail_next("GET", f"/instances/{name_of(launched)}", 503, "backendError", "unavailable")

    assert provider.describe(launched.instance_id).state == "running"


def test_list_instances_holds_only_spotruns_and_reads_every_page(provider, launch_request, cloud):
    spot = provider.launch(launch_request(token="sr-1-aaaa"))
    on_demand = provider.launch(launch_request(token="sr-2-bbbb", market="on-demand", zone="us-central1-b"))
    cloud.insert(ZONE, {"name": "not-ours", "machineType": "zones/us-central1-a/machineTypes/e2-small"}, None)
    cloud.preempt(ZONE, name_of(spot))  # deleted: no longer listed
    kept = provider.launch(launch_request(token="sr-3-cccc"))
    cloud.page_size = 1

    listed = {info.instance_id: info for info in provider.list_instances()}

    assert set(listed) == {on_demand.instance_id, kept.instance_id}
    assert listed[on_demand.instance_id].client_token == "sr-2-bbbb"
    assert listed[on_demand.instance_id].market == "on-demand"


def test_find_by_token(provider, launch_request, cloud):
    launched = provider.launch(launch_request(token="sr-1-aaaa", zone="us-central1-b"))

    assert provider.find_by_token("sr-1-aaaa") == provider.describe(launched.instance_id)
    assert provider.find_by_token("sr-1-zzzz") is None


def test_a_find_that_fails_raises(provider, cloud):
    cloud.fail_next("GET", "/aggregated/instances", 403, "forbidden", "Required 'compute.instances.list' permission")
    with pytest.raises(Exception, match="compute.instances.list"):
        provider.find_by_token("sr-1-aaaa")


@pytest.mark.parametrize("bad", ["i-0123456789abcdef0", "us-central1-a", "us-central1-a/Bad_Name", ""])
def test_instance_ids_that_are_not_gcps_are_refused(provider, bad):
    with pytest.raises(ValueError, match="not a GCP instance id"):
        provider.describe(bad)


def test_without_an_endpoint_override_the_sdk_would_go_to_google_which_the_guard_stops():
    """The guard the other tests rely on: it sees and blocks the real API's host."""
    provider = GcpProvider(project="spotrun-test", credentials=AnonymousCredentials(), call_timeout=0.5)
    with loopback_only() as attempts:
        info = provider.describe("us-central1-a/spotrun-x")
    assert info.state == "unknown"
    assert "compute.googleapis.com" in attempts
