"""GCE's error codes and reasons, translated into the provider errors the controller acts on.

A refusal arrives two ways: in the HTTP reply to the call (`errors[].reason`, an ErrorInfo `reason` among the
details) or, for an insert GCE accepted, in the finished operation's `error.errors[].code` (with ErrorInfo
reasons among each one's `errorDetails`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from spotrun.providers.base import LaunchInvalid, NoCapacity, ProviderError, QuotaExceeded

NO_CAPACITY_CODES = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "resource_availability",  # ErrorInfo reason of a stockout
    "STOCKOUT",
    "zoneResourcePoolExhausted",
})
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
# GCE's answer to a launch with a GPU its zone does not have (HTTP 400, reason badRequest): that zone cannot give the
# job an instance, as in a stockout, while other zones may.
_MISSING_ACCELERATOR = re.compile(r"acceleratorTypes/([A-Za-z0-9-]+)' was not found")
# An insert naming an image, network or subnetwork the project cannot see (the settings'): every zone refuses it
# alike and no retry mends it, so the job fails saying why.
_MISSING_SETTING = re.compile(r"'projects/[^']+/(?:global/images|global/networks|regions/[^/']+/subnetworks)/[^']+' was not found")

_REFUSALS: tuple[tuple[frozenset[str], type[ProviderError]], ...] = (
    (NO_CAPACITY_CODES, NoCapacity),
    (QUOTA_CODES, QuotaExceeded),
)


class GcpApiError(RuntimeError):
    """A Compute Engine call failed for a reason that is not a launch refusal; carries GCE's code and message."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"{operation} failed: {code}: {message}")
        self.operation = operation
        self.code = code


def http_error_codes(error: api_exceptions.GoogleAPICallError) -> list[str]:
    """Every reason GCE gave in an HTTP error reply, most specific first."""
    codes = [str(item.get("reason", "")) for item in error.errors or () if isinstance(item, dict)]
    codes += [str(item.get("code", "")) for item in error.errors or () if isinstance(item, dict)]
    if error.reason:
        codes.append(error.reason)
    codes += list(_error_info_reasons(error.details or ()))
    return [code for code in codes if code]


def operation_error_codes(operation: compute_v1.Operation) -> list[str]:
    codes = []
    for item in operation.error.errors:
        codes.append(item.code)
        codes += [detail.error_info.reason for detail in item.error_details if detail.error_info.reason]
    return [code for code in codes if code]


def operation_error_message(operation: compute_v1.Operation) -> str:
    messages = [item.message for item in operation.error.errors if item.message]
    return "; ".join(messages) or operation.http_error_message or "operation failed without a message"


def translate_http(error: api_exceptions.GoogleAPICallError, operation: str) -> Exception:
    """The exception to raise for a failed call: a ProviderError subclass for refusals, else GcpApiError."""
    codes = http_error_codes(error)
    return (_refusal(codes, error.message) or _missing_accelerator(error.message)
            or (_missing_setting(error.message) if operation == "compute.instances.insert" else None)
            or GcpApiError(operation, _first(codes, str(error.code or "Unknown")), error.message))


def translate_operation(operation: compute_v1.Operation, what: str) -> Exception:
    codes = operation_error_codes(operation)
    message = operation_error_message(operation)
    return (_refusal(codes, message) or _missing_accelerator(message)
            or GcpApiError(what, _first(codes, str(operation.http_error_status_code or "Unknown")), message))


def is_refusal(error: BaseException) -> bool:
    return isinstance(error, api_exceptions.GoogleAPICallError) and _refusal(http_error_codes(error), "") is not None


def _refusal(codes: Iterable[str], message: str) -> ProviderError | None:
    codes = list(codes)
    for known, refusal in _REFUSALS:
        found = next((code for code in codes if code in known), None)
        if found is not None:
            return refusal(f"{found}: {message}")
    return None


def _missing_accelerator(message: str | None) -> NoCapacity | None:
    found = _MISSING_ACCELERATOR.search(message or "")
    return NoCapacity(f"the zone has no {found.group(1)}: {message}") if found else None


def _missing_setting(message: str | None) -> LaunchInvalid | None:
    found = _MISSING_SETTING.search(message or "")
    return LaunchInvalid(f"the project has no such resource: {message}") if found else None


def _error_info_reasons(details: Iterable[Any]) -> Iterator[str]:
    for detail in details:
        if isinstance(detail, dict):
            reason = detail.get("reason") or (detail.get("errorInfo") or {}).get("reason")
            if reason:
                yield str(reason)
        elif getattr(detail, "reason", None):  # an ErrorInfo message parsed from a gRPC reply
            yield str(detail.reason)


def _first(codes: list[str], default: str) -> str:
    return codes[0] if codes else default
