"""Provider options: arguments over SPOTRUN_AWS_* variables over defaults, with errors that name the option."""

from __future__ import annotations

import pytest

from spotrun.providers.aws import AwsProvider, AwsSettings
from spotrun.providers.aws.settings import DEFAULT_IMAGE


def test_defaults() -> None:
    settings = AwsSettings.from_env({})

    assert settings.image == DEFAULT_IMAGE
    assert settings.region is None
    assert settings.bootstrap_command.startswith("python3 -m pip install --quiet 'spotrun==")


def test_environment_then_arguments() -> None:
    environ = {
        "SPOTRUN_AWS_IMAGE": "ami-0abc12345def67890",
        "SPOTRUN_AWS_SUBNETS": "us-east-1a=subnet-aaa, us-east-1b=subnet-bbb",
        "SPOTRUN_AWS_SECURITY_GROUP_IDS": "sg-1,sg-2",
        "SPOTRUN_AWS_KEY_NAME": "me",
        "SPOTRUN_AWS_REGION": "eu-west-1",
    }

    settings = AwsSettings.from_env(environ, key_name="other", instance_profile="spotrun-agent")

    assert settings.image == "ami-0abc12345def67890"
    assert settings.subnets == {"us-east-1a": "subnet-aaa", "us-east-1b": "subnet-bbb"}
    assert settings.security_group_ids == ("sg-1", "sg-2")
    assert (settings.key_name, settings.instance_profile, settings.region) == ("other", "spotrun-agent", "eu-west-1")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"image": "ubuntu"}, "image"),
        ({"subnets": {"us-east-1a": "vpc-1"}}, "subnets"),
        ({"security_group_ids": ["default"]}, "security_group_ids"),
        ({"python": " "}, "python"),
    ],
)
def test_bad_options_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AwsSettings.from_env({}, **options)


def test_bad_subnet_variable_is_named() -> None:
    with pytest.raises(ValueError, match="SPOTRUN_AWS_SUBNETS"):
        AwsSettings.from_env({"SPOTRUN_AWS_SUBNETS": "us-east-1a:subnet-1"})


def test_unknown_option_is_named() -> None:
    with pytest.raises(TypeError, match="imgae"):
        AwsProvider(imgae="ami-12345678")


@pytest.mark.usefixtures("shared_models")
def test_region_comes_from_the_standard_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert AwsProvider(image="ami-12345678").region == "ap-south-1"
    assert AwsProvider(image="ami-12345678", region="eu-central-1").region == "eu-central-1"


@pytest.mark.usefixtures("shared_models")
def test_no_region_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)

    with pytest.raises(ValueError, match="no AWS region"):
        AwsProvider(image="ami-12345678")
