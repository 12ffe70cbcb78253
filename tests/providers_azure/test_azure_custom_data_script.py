"""The custom data Azure gets; what every cloud's startup script does is in tests/providers_startup."""

from __future__ import annotations

import base64

import pytest

from spotrun.providers.azure import render_startup_script
from spotrun.providers.azure.startup import MAX_CUSTOM_DATA_BYTES, custom_data


def test_custom_data_is_base64_of_the_script() -> None:
    assert base64.b64decode(custom_data("#!/bin/bash\necho hi\n")) == b"#!/bin/bash\necho hi\n"


def test_custom_data_over_azures_limit_is_refused() -> None:
    huge = {"argv": ["python"], "env": {"BIG": "x" * MAX_CUSTOM_DATA_BYTES}}
    script = render_startup_script(huge, "true", "python3", vm_name="spotrun-x")

    with pytest.raises(ValueError, match="Azure custom data is limited to"):
        custom_data(script)
