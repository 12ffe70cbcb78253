"""What only EC2 adds to the startup script; what every cloud's script does is in tests/providers_startup."""

from __future__ import annotations

import pytest

from spotrun.providers.aws import render_startup_script
from spotrun.providers.aws.startup import MAX_USER_DATA_BYTES


def test_oversized_user_data_is_refused() -> None:
    with pytest.raises(ValueError, match=str(MAX_USER_DATA_BYTES)):
        render_startup_script({"argv": ["python"], "env": {"BIG": "x" * MAX_USER_DATA_BYTES}}, "true", "python3")
