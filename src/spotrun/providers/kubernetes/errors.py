"""The API server's refusals, translated into the provider errors the controller acts on."""

from __future__ import annotations

import json

import urllib3
from kubernetes.client.exceptions import ApiException

from spotrun.providers.base import QuotaExceeded

# What a failed call raises: the API's answer, or the HTTP layer's failure to get one.
CALL_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


class KubernetesApiError(RuntimeError):
    """A Kubernetes API call failed for a reason that is not a launch refusal; carries the API's reason."""

    def __init__(self, operation: str, reason: str, message: str) -> None:
        super().__init__(f"{operation} failed: {reason}: {message}")
        self.operation = operation
        self.reason = reason


def status_of(error: ApiException) -> tuple[str, str]:
    """(reason, message) of the Status object the API server answered with."""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    return str(body.get("reason") or error.reason or error.status), str(body.get("message") or error.body or "")


def translate(error: BaseException, operation: str) -> Exception:
    """A ResourceQuota that the pod would exceed is the namespace's quota; anything else is an API error."""
    if isinstance(error, ApiException):
        reason, message = status_of(error)
        if error.status == 403 and "exceeded quota" in message:
            return QuotaExceeded(f"{operation}: {message}")
        return KubernetesApiError(operation, f"{error.status} {reason}", message)
    return KubernetesApiError(operation, type(error).__name__, str(error))

