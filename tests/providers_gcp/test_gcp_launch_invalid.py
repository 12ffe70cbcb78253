"""GCE refusing an insert because the configured image does not exist: what the provider raises."""

from __future__ import annotations

import pytest

from spotrun.providers.base import LaunchInvalid


def test_an_insert_naming_a_missing_image_is_invalid(provider, launch_request, cloud):
    cloud.fail_next("POST", "/instances", 404, "notFound",
                    "The resource 'projects/spotrun-test/global/images/family/no-such-family' was not found")

    with pytest.raises(Exception) as raised:
        provider.launch(launch_request())

    assert isinstance(raised.value, LaunchInvalid)
