"""Azure's error codes, translated into the provider errors the controller acts on.

Codes come from ARM's error body ({"error": {"code", "message", "details": [...]}}) of a refused request, or of a
long-running operation that failed (allocation failures arrive that way, after the PUT was accepted).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from azure.core.exceptions import AzureError, HttpResponseError, ODataV4Format, ResourceNotFoundError

from spotrun.providers.base import LaunchInvalid, NoCapacity, PriceTooLow, ProviderError, QuotaExceeded

CREATE_VM = "Microsoft.Compute/virtualMachines/write"

NO_CAPACITY_CODES = frozenset({
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
    # The size never runs as spot: to the policy that is spot capacity that does not exist.
    "AzureSpotIsNotSupportedForThisVMSize",
})
PRICE_TOO_LOW_CODES = frozenset({"SpotPriceGreaterThanProvidedMaxPrice"})
QUOTA_CODES = frozenset({"QuotaExceeded"})
# A create naming what the subscription does not have (the settings' image, subnet, identity or resource group) or a
# value Azure does not take (InvalidParameter names it): every retry, in every zone, is refused alike, so the job
# fails saying why. InvalidTemplateDeployment only wraps such a cause, which is found among its details.
INVALID_LAUNCH_CODES = frozenset({
    "InvalidParameter",
    "ImageNotFound",
    "PlatformImageNotFound",
    "GalleryImageNotFound",
    "InvalidResourceReference",
    "LinkedInvalidPropertyId",
    "ResourceGroupNotFound",
})
# A 404 with one of these says the VM, or the resource group it was in, does not exist; another (SubscriptionNotFound:
# a credential or subscription problem) says nothing of the VM.
GONE_CODES = frozenset({"ResourceNotFound", "NotFound", "ResourceGroupNotFound"})
# Codes whose message says what happened; Azure reports both quota and price refusals this way.
GENERIC_CODES = frozenset({"OperationNotAllowed", "BadRequest", "Conflict"})
_QUOTA_TEXT = re.compile(r"\bquota\b", re.IGNORECASE)
_PRICE_TEXT = re.compile(r"max(imum)? price .* lower than the current spot price", re.IGNORECASE | re.DOTALL)

_REFUSALS: dict[frozenset[str], type[ProviderError]] = {
    NO_CAPACITY_CODES: NoCapacity,
    PRICE_TOO_LOW_CODES: PriceTooLow,
    QUOTA_CODES: QuotaExceeded,
}


class AzureApiError(RuntimeError):
    """An ARM call failed for a reason that is not a launch refusal; carries Azure's code and message."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"{operation} failed: {code}: {message}")
        self.operation = operation
        self.code = code


def error_code(error: AzureError) -> str:
    detail = getattr(error, "error", None)
    return str(detail.code) if isinstance(detail, ODataV4Format) and detail.code else ""


def vm_gone(error: AzureError) -> bool:
    """Whether a failed call on a VM says that the VM does not exist."""
    return isinstance(error, ResourceNotFoundError) and error_code(error) in GONE_CODES


def error_message(error: AzureError) -> str:
    detail = getattr(error, "error", None)
    if isinstance(detail, ODataV4Format) and detail.message:
        return str(detail.message)
    return str(error.message) if getattr(error, "message", None) else type(error).__name__


def refusal_for(code: str, message: str) -> type[ProviderError] | None:
    """The refusal an ARM error code (and, for generic codes, its message) stands for; None if it is no refusal."""
    for codes, refusal in _REFUSALS.items():
        if code in codes:
            return refusal
    if code in GENERIC_CODES:
        if _PRICE_TEXT.search(message):
            return PriceTooLow
        if _QUOTA_TEXT.search(message):
            return QuotaExceeded
    return None


def launch_refusal_for(code: str, message: str) -> type[ProviderError] | None:
    """The refusal a failed create's code stands for: one `refusal_for` names, or LaunchInvalid."""
    refusal = refusal_for(code, message)
    if refusal is None and code in INVALID_LAUNCH_CODES:
        return LaunchInvalid
    return refusal


def translate(error: AzureError, operation: str) -> Exception:
    """The exception to raise for `error`: a ProviderError subclass for refusals (LaunchInvalid only for a create),
    else AzureApiError. A capacity, price or quota refusal anywhere among the codes wins over an invalid launch."""
    codes = list(_codes(error))
    found = _first_refusal(codes, refusal_for)
    if found is None and operation == CREATE_VM:
        found = _first_refusal(codes, launch_refusal_for)
    if found is not None:
        refusal, code, message = found
        return refusal(f"{code}: {message}")
    return AzureApiError(operation, error_code(error) or type(error).__name__, error_message(error))


def _first_refusal(
    codes: list[tuple[str, str]], refusal_of: Callable[[str, str], type[ProviderError] | None]
) -> tuple[type[ProviderError], str, str] | None:
    for code, message in codes:
        refusal = refusal_of(code, message)
        if refusal is not None:
            return refusal, code, message
    return None


def _codes(error: AzureError) -> Iterator[tuple[str, str]]:
    """(code, message) of the error and of its details, outermost first (ARM nests the precise cause)."""
    detail = getattr(error, "error", None)
    if not isinstance(error, HttpResponseError) or not isinstance(detail, ODataV4Format):
        return
    pending = [detail]
    while pending:
        current = pending.pop(0)
        if current.code:
            yield str(current.code), str(current.message or "")
        pending.extend(item for item in current.details or [] if isinstance(item, ODataV4Format))
