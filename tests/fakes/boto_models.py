"""One botocore data loader for the boto3 sessions a test makes: what the code under test builds with a fresh
`boto3.Session()` reads botocore's endpoints and service models from disk again (0.5-1 s for EC2's); through a
shared loader they are read once per test process, as one session reads them once. Nothing else of the sessions is
shared: credentials, region and configuration still come from each session's own chain."""

from __future__ import annotations

import botocore.loaders
import botocore.session
import pytest

_LOADER: botocore.loaders.Loader | None = None


def share_botocore_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the test ends, every new botocore (so boto3) session takes the process's one loader."""
    global _LOADER
    if _LOADER is None:
        _LOADER = botocore.loaders.create_loader()
    # boto3.Session appends its own data folder to its loader's paths: each session's appends go when the test does
    monkeypatch.setattr(_LOADER, "_search_paths", list(_LOADER.search_paths))
    monkeypatch.setattr(botocore.session, "create_loader", lambda search_path_string=None: _LOADER)
