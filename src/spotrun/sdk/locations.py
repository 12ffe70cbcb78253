"""Where checkpoints live: a local path or an fsspec URL, as the filesystem and path to use.

Apart from ``storage`` (which needs torch to read and write checkpoints) so that what only finds a store, the agent
backing checkpoints up and the `spotrun` CLI, starts without importing torch: two seconds and 200 MB each time.
"""

from __future__ import annotations

from typing import Any

import fsspec


def url_to_fs(location: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and path of a local path or URL, as ``fsspec.core.url_to_fs``, except that a local path with
    ``::`` in it (``runs/lr::0.1``) stays that path: fsspec takes ``::`` for the joint of a chained URL
    (``simplecache::s3://bucket/run``) and would put the checkpoints in ``runs/lr``, another run's folder maybe."""
    if "::" in location and not _names_filesystem(location.split("::", 1)[0]):
        fs = fsspec.filesystem("file", **(storage_options or {}))
        return fs, fs._strip_protocol(location)
    return fsspec.core.url_to_fs(location, **(storage_options or {}))


def _names_filesystem(link: str) -> bool:
    """Whether the first link of a chained URL names a filesystem (``s3://bucket``, ``simplecache``)."""
    return "://" in link or link in fsspec.available_protocols()
