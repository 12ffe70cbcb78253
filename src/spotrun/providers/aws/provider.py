"""AWS EC2 as a provider: spot and on-demand instances through boto3, idempotent on the client token."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from spotrun.providers.aws.errors import MALFORMED_ID_CODES, NOT_FOUND_CODES, error_code, translate
from spotrun.providers.aws.instances import JOB_TAG, TOKEN_TAG, instance_info, unknown_info
from spotrun.providers.aws.settings import AwsSettings
from spotrun.providers.aws.startup import render_startup_script
from spotrun.providers.base import InstanceInfo, LaunchInvalid, LaunchRequest, check_token_and_market
from spotrun.providers.startup import job_id_of
from spotrun.providers.zone_cache import ZoneCache

log = logging.getLogger(__name__)

CLOUD = "aws"
MAX_CLIENT_TOKEN_LENGTH = 64  # EC2's limit on ClientToken
_INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")


class PreemptUnsupported(NotImplementedError):
    """EC2 has no API call that reclaims one's own spot instance."""


class AwsProvider:
    """EC2 instances, described by `AwsSettings` (arguments here override SPOTRUN_AWS_* variables).

    `session` and `endpoint_url` are for pointing boto3 elsewhere (tests use moto); credentials come only
    from boto3's standard chain.
    """

    name = CLOUD

    def __init__(
        self,
        settings: AwsSettings | None = None,
        *,
        session: boto3.Session | None = None,
        endpoint_url: str | None = None,
        **options: Any,
    ) -> None:
        if settings is not None and options:
            raise TypeError("pass either settings or individual options, not both")
        self.settings = settings or AwsSettings.from_env(**options)
        session = session or boto3.Session(region_name=self.settings.region)
        config = Config(retries={"mode": "standard", "max_attempts": 5})
        try:
            self.ec2 = session.client("ec2", endpoint_url=endpoint_url, config=config)
            self.ssm = session.client("ssm", endpoint_url=endpoint_url, config=config)
        except NoRegionError as error:
            raise ValueError("no AWS region: set region=, SPOTRUN_AWS_REGION, AWS_REGION or a profile's region") from error
        self._zone_cache = ZoneCache()

    @property
    def region(self) -> str:
        return self.ec2.meta.region_name

    # -- where -------------------------------------------------------------------------------------------

    def zones(self, instance_type: str, accelerators: Mapping[str, int] | None = None) -> list[str]:
        """Available zones of the region that offer `instance_type` (`ZoneCache`: asked at most every 10 minutes).
        An EC2 type carries its GPUs: `accelerators` changes nothing."""
        return self._zone_cache.zones(instance_type, lambda: self._list_zones(instance_type))

    def _list_zones(self, instance_type: str) -> list[str]:
        offered = {
            offering["Location"]
            for page in self._pages(
                "describe_instance_type_offerings",
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": [instance_type]}],
            )
            for offering in page["InstanceTypeOfferings"]
        }
        available = {
            zone["ZoneName"]
            for zone in self._call(
                "describe_availability_zones",
                Filters=[{"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]}],
            )["AvailabilityZones"]
        }
        return sorted(offered & available)

    def spot_prices(self, instance_type: str) -> dict[str, float]:
        """The current spot price ($/h) of `instance_type` in each zone that has one."""
        latest: dict[str, tuple[datetime, float]] = {}
        for page in self._pages(
            "describe_spot_price_history",
            InstanceTypes=[instance_type],
            ProductDescriptions=[self.settings.product_description],
            StartTime=datetime.now(timezone.utc),
        ):
            for entry in page["SpotPriceHistory"]:
                zone, at = entry["AvailabilityZone"], entry["Timestamp"]
                if zone not in latest or at > latest[zone][0]:
                    latest[zone] = (at, float(entry["SpotPrice"]))
        return {zone: price for zone, (_, price) in sorted(latest.items())}

    # -- launch ------------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> InstanceInfo:
        _validate(request)
        existing = self.find_by_token(request.client_token)
        if existing is not None:
            _check_same_request(existing, request)
            return existing
        # EC2 also deduplicates on ClientToken, which covers a launch whose instance is not listed yet.
        response = self._call("run_instances", **self._run_parameters(request))
        info = instance_info(response["Instances"][0])
        log.info(
            "launched %s: %s %s in %s (client token %s)",
            info.instance_id, request.market, request.instance_type, request.zone, request.client_token,
        )
        return info

    def _run_parameters(self, request: LaunchRequest) -> dict[str, Any]:
        settings = self.settings
        parameters: dict[str, Any] = {
            "ImageId": self._image_id(),
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": request.client_token,
            "UserData": render_startup_script(request.user_data, settings.bootstrap_command, settings.python),
            "Placement": {"AvailabilityZone": request.zone},
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "TagSpecifications": [
                {"ResourceType": kind, "Tags": _tags(request)} for kind in ("instance", "volume")
            ],
        }
        if request.market == "spot":
            spot_options: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if request.max_price is not None:
                spot_options["MaxPrice"] = str(request.max_price)
            parameters["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot_options}
        if request.zone in settings.subnets:
            parameters["SubnetId"] = settings.subnets[request.zone]
        if settings.security_group_ids:
            parameters["SecurityGroupIds"] = list(settings.security_group_ids)
        if settings.key_name:
            parameters["KeyName"] = settings.key_name
        if settings.instance_profile:
            key = "Arn" if settings.instance_profile.startswith("arn:") else "Name"
            parameters["IamInstanceProfile"] = {key: settings.instance_profile}
        return parameters

    def _image_id(self) -> str:
        image = self.settings.image
        if not image.startswith("/"):
            return image
        try:
            return self.ssm.get_parameter(Name=image)["Parameter"]["Value"]
        except ClientError as error:
            if error_code(error) == "ParameterNotFound":
                raise LaunchInvalid(f"image SSM parameter {image!r} does not exist in {self.region}") from error
            raise translate(error, "ssm:GetParameter") from error

    # -- look --------------------------------------------------------------------------------------------

    def describe(self, instance_id: str) -> InstanceInfo:
        """EC2's view; a failed call, or an id EC2 does not (yet) list, answers state="unknown"."""
        _check_instance_id(instance_id)
        try:
            reservations = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as error:
            if error_code(error) in MALFORMED_ID_CODES:
                raise ValueError(f"{instance_id!r} is not an EC2 instance id") from error
            return unknown_info(instance_id, f"{error_code(error)}: describe_instances failed")
        except BotoCoreError as error:
            return unknown_info(instance_id, f"describe_instances failed: {type(error).__name__}")
        instances = [raw for reservation in reservations for raw in reservation["Instances"]]
        if not instances:
            return unknown_info(instance_id, "not listed by EC2")
        return instance_info(instances[0])

    def find_by_token(self, client_token: str) -> InstanceInfo | None:
        tagged = self._tagged_instances([{"Name": f"tag:{TOKEN_TAG}", "Values": [client_token]}])
        found = [info for info in tagged if info.client_token == client_token]  # EC2's filters take * and ? as wildcards
        if not found:
            return None
        # One launch per token; should a duplicate exist, a live one is the answer.
        return min(found, key=lambda info: (info.state == "terminated", -(info.launched_at or 0.0)))

    def list_instances(self) -> list[InstanceInfo]:
        """Every instance spotrun launched in this region (tagged with a client token), terminated ones included."""
        return self._tagged_instances([{"Name": "tag-key", "Values": [TOKEN_TAG]}])

    def _tagged_instances(self, filters: list[dict[str, Any]]) -> list[InstanceInfo]:
        return [
            instance_info(raw)
            for page in self._pages("describe_instances", Filters=filters)
            for reservation in page["Reservations"]
            for raw in reservation["Instances"]
        ]

    # -- end ---------------------------------------------------------------------------------------------

    def terminate(self, instance_id: str) -> None:
        """Idempotent: an instance already terminated, or no longer known to EC2, is fine."""
        _check_instance_id(instance_id)
        try:
            self.ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as error:
            code = error_code(error)
            if code in NOT_FOUND_CODES:
                return
            if code in MALFORMED_ID_CODES:
                raise ValueError(f"{instance_id!r} is not an EC2 instance id") from error
            raise translate(error, "ec2:TerminateInstances") from error
        log.info("terminating %s", instance_id)

    def preempt(self, instance_id: str, notice_seconds: float | None = None) -> None:
        raise PreemptUnsupported(
            "EC2 cannot reclaim a spot instance on request; use AWS Fault Injection Service's "
            f"aws:ec2:send-spot-instance-interruptions action on {instance_id} (2 minutes of notice), "
            "or terminate it"
        )

    # -- calls -------------------------------------------------------------------------------------------

    def _call(self, operation: str, **parameters: Any) -> dict[str, Any]:
        try:
            return getattr(self.ec2, operation)(**parameters)
        except ClientError as error:
            raise translate(error, f"ec2:{_api_name(operation)}") from error

    def _pages(self, operation: str, **parameters: Any) -> Iterator[dict[str, Any]]:
        try:
            yield from self.ec2.get_paginator(operation).paginate(**parameters)
        except ClientError as error:
            raise translate(error, f"ec2:{_api_name(operation)}") from error


def _validate(request: LaunchRequest) -> None:
    check_token_and_market(request, MAX_CLIENT_TOKEN_LENGTH)
    if not request.zone:
        raise ValueError("launch request needs a zone")
    if not request.instance_type:
        raise ValueError("launch request needs an instance_type")
    if request.max_price is not None and request.max_price <= 0:
        raise ValueError(f"max_price must be > 0, got {request.max_price}")


def _check_instance_id(instance_id: str) -> None:
    if not isinstance(instance_id, str) or not _INSTANCE_ID.fullmatch(instance_id):
        raise ValueError(f"{instance_id!r} is not an EC2 instance id (i- and 8 or 17 hex digits)")


def _check_same_request(existing: InstanceInfo, request: LaunchRequest) -> None:
    had = (existing.zone, existing.market, existing.instance_type)
    asked = (request.zone, request.market, request.instance_type)
    if had != asked:
        raise ValueError(f"client token {request.client_token!r} was used for {existing.instance_id} {had}, not for {asked}")


def _tags(request: LaunchRequest) -> list[dict[str, str]]:
    tags = {"Name": f"spotrun-{request.client_token}", TOKEN_TAG: request.client_token}
    job_id = job_id_of(request.user_data)
    if job_id is not None:
        tags[JOB_TAG] = job_id
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def _api_name(operation: str) -> str:
    return "".join(part.capitalize() for part in operation.split("_"))
