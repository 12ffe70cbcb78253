"""uvicorn's logging for `spotrun server`, its access log writing no token's secret: a token pasted into a URL
(`POST /api/v1/tokens/spr_<prefix>_<secret>/revoke`) is written `spr_<prefix>_...`."""

from __future__ import annotations

import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG

from spotrun.server.users import without_secrets

ACCESS_LOGGER = "uvicorn.access"


class SecretsCut(logging.Filter):
    """Cuts tokens' secrets from an access record's values (the path with its query string among them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(without_secrets(value) if isinstance(value, str) else value for value in record.args)
        return True


def logging_config() -> dict[str, Any]:
    """uvicorn's own logging configuration (a copy: uvicorn writes into the one it is given), with `SecretsCut` on
    the access log."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["secrets_cut"] = {"()": SecretsCut}
    config["loggers"][ACCESS_LOGGER].setdefault("filters", []).append("secrets_cut")
    return config
