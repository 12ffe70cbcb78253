"""Names and labels Kubernetes knows spotrun's pods by, all derived from the launch's client token.

Pod names are unique per namespace, so a name derived from the client token makes a second create of the same
launch fail with AlreadyExists instead of starting a second pod. spotrun's instance ids are "NAMESPACE/NAME".
"""

from __future__ import annotations

import hashlib
import re

NAME_PREFIX = "spotrun-"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "spotrun"
TOKEN_LABEL = "spotrun.dev/client-token"  # a label value holds at most 63 characters: hashed when longer
TOKEN_ANNOTATION = "spotrun.dev/client-token"  # the exact token
JOB_LABEL = "spotrun.dev/job"
MARKET_LABEL = "spotrun.dev/market"
# Keeps a pod in the API once it has ended, until spotrun has read how (a reclaim or not) and lets it go.
FINALIZER = "spotrun.dev/attempt-record"
MAX_NAME_LENGTH = 63
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def pod_name(client_token: str) -> str:
    """`spotrun-<token>` where that is a DNS label, else `spotrun-<hash of the token>`."""
    readable = NAME_PREFIX + client_token
    if len(readable) <= MAX_NAME_LENGTH and _DNS_LABEL.fullmatch(readable):
        return readable
    return NAME_PREFIX + hashlib.sha256(client_token.encode()).hexdigest()[:32]


def label_value(value: str) -> str:
    """`value` itself where Kubernetes takes it as a label value, else a hash of it."""
    if len(value) <= 63 and _LABEL_VALUE.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def instance_id(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def parse_instance_id(value: str) -> tuple[str, str]:
    """(namespace, name) of a spotrun Kubernetes instance id "NAMESPACE/NAME"."""
    namespace, sep, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if not sep or not _DNS_LABEL.fullmatch(namespace) or not _DNS_LABEL.fullmatch(name):
        raise ValueError(f"{value!r} is not a Kubernetes instance id (NAMESPACE/POD, e.g. default/spotrun-sr-1-abc)")
    return namespace, name
