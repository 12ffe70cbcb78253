"""Names GCE knows spotrun's instances by, all derived from the launch's client token.

GCE instance names are unique per project and zone, so a name derived from the client token makes a second
insert of the same launch fail with "alreadyExists" instead of starting a second instance; the insert's
request id (a UUID, also derived from the token) makes GCE itself answer a retried insert with the first
operation. spotrun's instance ids are "ZONE/NAME", because every GCE call about an instance needs its zone.
"""

from __future__ import annotations

import hashlib
import re
import uuid

NAME_PREFIX = "spotrun-"
TOKEN_LABEL = "spotrun-token"  # label values: lowercase letters, digits, "_" and "-", at most 63
JOB_LABEL = "spotrun-job"
TOKEN_METADATA_KEY = "spotrun-client-token"  # the exact token, which a label may not be able to hold
MAX_NAME_LENGTH = 63
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{1,63}")
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
# A fixed namespace: the same client token gives the same request id on every controller.
_REQUEST_ID_NAMESPACE = uuid.UUID("5f3b0c1e-8d2a-4c3e-9a61-7d0f6b2e4a90")


def instance_name(client_token: str) -> str:
    """`spotrun-<token>` when the token fits GCE's name rules, else `spotrun-<hash of the token>`."""
    readable = NAME_PREFIX + client_token
    if len(readable) <= MAX_NAME_LENGTH and _NAME.fullmatch(readable):
        return readable
    return NAME_PREFIX + hashlib.sha256(client_token.encode()).hexdigest()[:32]


def request_id(client_token: str) -> str:
    return str(uuid.uuid5(_REQUEST_ID_NAMESPACE, client_token))


def label_value(value: str) -> str:
    """`value` itself when GCE accepts it as a label value, else a hash of it."""
    if _LABEL_VALUE.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def instance_id(zone: str, name: str) -> str:
    return f"{zone}/{name}"


def parse_instance_id(value: str) -> tuple[str, str]:
    """(zone, name) of a spotrun GCP instance id "ZONE/NAME"."""
    zone, sep, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if not sep or not _ZONE.fullmatch(zone) or not _NAME.fullmatch(name):
        raise ValueError(f"{value!r} is not a GCP instance id (ZONE/NAME, e.g. us-central1-a/spotrun-sr-1-abc)")
    return zone, name


def check_zone(zone: str) -> None:
    if not isinstance(zone, str) or not _ZONE.fullmatch(zone):
        raise ValueError(f"{zone!r} is not a GCE zone name (e.g. us-central1-a)")


def last_segment(url: str) -> str:
    """"n1-standard-8" from ".../zones/us-central1-a/machineTypes/n1-standard-8" (GCE answers with URLs)."""
    return url.rstrip("/").rsplit("/", 1)[-1]
