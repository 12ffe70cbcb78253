"""EC2's error codes, translated into the provider errors the controller acts on."""

from __future__ import annotations

from botocore.exceptions import ClientError

from spotrun.providers.base import LaunchInvalid, NoCapacity, PriceTooLow, ProviderError, QuotaExceeded

NO_CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "UnfulfillableCapacity",
    "capacity-not-available",
    "capacity-oversubscribed",
})
PRICE_TOO_LOW_CODES = frozenset({"SpotMaxPriceTooLow", "price-too-low"})
QUOTA_CODES = frozenset({
    "MaxSpotInstanceCountExceeded",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
})
# A launch naming something the account or region does not have (the settings' AMI, subnet, security group, key
# pair): every retry, in every zone, is refused alike, so the job fails saying why.
INVALID_LAUNCH_CODES = frozenset({
    "InvalidAMIID.NotFound",
    "InvalidAMIID.Malformed",
    "InvalidAMIID.Unavailable",
    "InvalidSubnetID.NotFound",
    "InvalidGroup.NotFound",
    "InvalidKeyPair.NotFound",
})
NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound"})
MALFORMED_ID_CODES = frozenset({"InvalidInstanceID.Malformed"})

_REFUSALS: dict[frozenset[str], type[ProviderError]] = {
    NO_CAPACITY_CODES: NoCapacity,
    PRICE_TOO_LOW_CODES: PriceTooLow,
    QUOTA_CODES: QuotaExceeded,
}


class AwsApiError(RuntimeError):
    """An EC2 or SSM call failed for a reason that is not a launch refusal; carries AWS's code and message."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"{operation} failed: {code}: {message}")
        self.operation = operation
        self.code = code


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def error_message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", "")) or str(error)


def translate(error: ClientError, operation: str) -> Exception:
    """The exception to raise for `error`: a ProviderError subclass for refusals, else AwsApiError."""
    code = error_code(error)
    message = error_message(error)
    for codes, refusal in _REFUSALS.items():
        if code in codes:
            return refusal(f"{code}: {message}")
    if operation == "ec2:RunInstances" and code in INVALID_LAUNCH_CODES:
        return LaunchInvalid(f"{code}: {message}")
    return AwsApiError(operation, code or "Unknown", message)
