"""Reach a local fake ARM through the real azure-core pipeline: the client keeps https://management.azure.com (so
bearer-token authentication, retries and LRO polling run unchanged), and only the socket goes to 127.0.0.1."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from azure.core.credentials import AccessToken
from azure.core.exceptions import ServiceRequestError
from azure.core.pipeline.transport import RequestsTransport

ARM_HOST = "management.azure.com"
FAKE_TOKEN = "fake-arm-token-5d2e"  # distinctive, so tests can prove it never leaves the controller


class LoopbackTransport(RequestsTransport):
    """Sends https://management.azure.com/... to `target` (http://127.0.0.1:PORT); refuses every other host, so a
    test can never reach the network. Proxy variables are ignored."""

    def __init__(self, target: str, **kwargs: Any) -> None:
        super().__init__(use_env_settings=False, **kwargs)
        parts = urlsplit(target)
        if parts.hostname != "127.0.0.1":
            raise ValueError(f"LoopbackTransport only forwards to 127.0.0.1, got {target!r}")
        self._target = parts

    def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        original = request.url
        parts = urlsplit(original)
        if parts.scheme != "https" or parts.netloc.lower() != ARM_HOST:
            raise ServiceRequestError(f"the fake ARM transport only reaches https://{ARM_HOST}, not {original}")
        request.url = urlunsplit((self._target.scheme, self._target.netloc, parts.path, parts.query, ""))
        try:
            return super().send(request, **kwargs)
        finally:
            request.url = original  # pollers read the original request's URL afterwards


class FakeCredential:
    """A TokenCredential that hands out a dummy bearer token and counts how often it was asked."""

    def __init__(self, token: str = FAKE_TOKEN) -> None:
        self.token = token
        self.requests: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.requests.append(scopes)
        expires = int(datetime.now(timezone.utc).timestamp()) + 3600
        return AccessToken(self.token, expires)
