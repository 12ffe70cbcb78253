"""What a notice leaves a final save and its upload, per notice source; what a manifest says a save took."""

from __future__ import annotations

from spotrun.agent.cloud_notices import AwsSpotNotice, AzurePreemptNotice, GcpPreemptionNotice
from spotrun.agent.notices import SigtermNotice
from spotrun.agent.save_budget import SaveBudget, SlowSaveCheck, budget_for
from spotrun.sdk.layout import save_seconds_of


def test_the_clouds_notice_counts_and_a_notice_without_deadline_gets_the_grace() -> None:
    sigterm = SigtermNotice(12.0)
    assert budget_for([AwsSpotNotice(), sigterm], 12.0) == SaveBudget(120.0, "aws-imds")
    assert budget_for([GcpPreemptionNotice(), sigterm], 12.0) == SaveBudget(30.0, "gcp-metadata")
    assert budget_for([AzurePreemptNotice(), sigterm], 12.0) == SaveBudget(30.0, "azure-scheduled-events")
    assert budget_for([sigterm], 12.0).seconds == 12.0  # Kubernetes: the pod's SIGTERM, then the grace


def test_only_the_first_checkpoint_over_the_budget_is_reported_an_untimed_save_counts_its_upload() -> None:
    reports: list[dict] = []
    check = SlowSaveCheck(SaveBudget(30.0, "gcp-metadata"), reports.append)
    check.checked(1, 10.0, 19.0)
    check.checked(2, None, 31.0)
    check.checked(3, 50.0, 0.0)
    assert reports == [{"checkpoint_step": 2, "save_seconds": None, "upload_seconds": 31.0, "budget_seconds": 30.0,
                        "notice": "gcp-metadata"}]


def test_a_manifests_save_seconds_is_read_only_when_it_is_a_duration() -> None:
    assert save_seconds_of({"save_seconds": 2.5}) == 2.5 and save_seconds_of({"save_seconds": 3}) == 3.0
    for bad in ({}, {"save_seconds": -1}, {"save_seconds": True}, {"save_seconds": "2"}, {"save_seconds": float("inf")}):
        assert save_seconds_of(bad) is None, bad
