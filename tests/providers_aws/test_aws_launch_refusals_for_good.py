"""a launch EC2 refuses for a reason no retry mends is LaunchInvalid (the job fails saying why), not an
AwsApiError the controller retries for as long as the job lives."""

from __future__ import annotations

import pytest

from spotrun.providers.base import LaunchInvalid


@pytest.mark.parametrize("code", ["InvalidAMIID.NotFound", "InvalidSubnetID.NotFound", "InvalidGroup.NotFound",
                                  "InvalidKeyPair.NotFound"])
def test_a_launch_refused_for_a_missing_resource_is_invalid(aws_in_process, make_request, inject, code) -> None:
    inject(aws_in_process, "RunInstances", error=(code, "The id does not exist"))

    with pytest.raises(Exception) as raised:
        aws_in_process.launch(make_request("sr-42-invalid"))

    assert isinstance(raised.value, LaunchInvalid)


@pytest.mark.usefixtures("shared_models")
def test_an_image_parameter_that_does_not_exist_is_invalid(aws_in_process, make_request) -> None:
    from spotrun.providers.aws import AwsProvider
    provider = AwsProvider(image="/spotrun/hunt/no-such-parameter")  # inside aws_in_process's mock_aws()

    with pytest.raises(Exception) as raised:
        provider.launch(make_request("sr-42-noparam"))

    assert isinstance(raised.value, LaunchInvalid)
