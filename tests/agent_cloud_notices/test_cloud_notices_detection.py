"""Which cloud sources `metadata_notice_sources` turns on: from the environment only, without probing."""

from __future__ import annotations

import logging

import pytest

from spotrun.agent.cloud_notices import AwsSpotNotice, AzurePreemptNotice, GcpPreemptionNotice
from spotrun.agent.notices import LocalMetadataNotice, metadata_notice_sources


def kinds(environ: dict[str, str]) -> list[type]:
    return [type(source) for source in metadata_notice_sources(environ)]


def test_no_cloud_named_means_no_cloud_source():
    assert kinds({}) == []


@pytest.mark.parametrize(
    ("cloud", "kind"), [("aws", AwsSpotNotice), ("gcp", GcpPreemptionNotice), ("Azure", AzurePreemptNotice)]
)
def test_the_named_cloud_gets_its_source(cloud, kind):
    assert kinds({"SPOTRUN_CLOUD": cloud}) == [kind]


def test_local_metadata_and_a_cloud_together(tmp_path):
    environ = {"SPOTRUN_LOCAL_METADATA": str(tmp_path), "SPOTRUN_CLOUD": "aws"}
    assert kinds(environ) == [LocalMetadataNotice, AwsSpotNotice]


def test_an_unknown_cloud_gets_no_source_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert kinds({"SPOTRUN_CLOUD": "oracle"}) == []
    assert "SPOTRUN_CLOUD='oracle'" in caplog.text and "aws, gcp, azure" in caplog.text


def test_endpoint_overrides_turn_sources_on_without_any_request(imds, gce, azure):
    environ = {
        "SPOTRUN_AWS_METADATA_URL": imds.url,
        "SPOTRUN_GCE_METADATA_URL": gce.url + "/",
        "SPOTRUN_AZURE_METADATA_URL": azure.url,
    }
    sources = metadata_notice_sources(environ)
    assert [type(source) for source in sources] == [AwsSpotNotice, GcpPreemptionNotice, AzurePreemptNotice]
    assert imds.request_count() == gce.request_count() == azure.request_count() == 0
    for source in sources:
        assert source.poll() is None
        source.close()  # type: ignore[attr-defined]
    assert imds.request_count() > 0 and azure.request_count() > 0


def test_the_azure_vm_name_and_acknowledgement_come_from_the_environment(azure):
    (source,) = metadata_notice_sources(
        {"SPOTRUN_AZURE_METADATA_URL": azure.url, "SPOTRUN_AZURE_VM_NAME": "vm-1",
         "SPOTRUN_AZURE_ACKNOWLEDGE_PREEMPT": "true"}
    )
    azure.schedule_event("Preempt", resources=["vm-2"])
    assert source.poll() is None
    event = azure.schedule_event("Preempt", resources=["vm-1"])
    assert source.poll() is not None
    source.instance_may_go()
    assert azure.acknowledged == [event.event_id]


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SPOTRUN_AWS_METADATA_URL", "169.254.169.254"), ("SPOTRUN_GCE_METADATA_URL", "ftp://x"),
     ("SPOTRUN_AZURE_ACKNOWLEDGE_PREEMPT", "maybe")],
)
def test_a_malformed_setting_is_an_error_naming_it(variable, value):
    environ = {"SPOTRUN_CLOUD": "azure", variable: value}
    with pytest.raises(ValueError, match=f"\\${variable} must be .*{value}"):
        metadata_notice_sources(environ)
