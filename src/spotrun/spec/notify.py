"""The words of a job file's `notify:`: which happenings can be told, and the webhook they are posted to.

A webhook URL is a credential (a Slack incoming webhook's path is its secret), so it is shown only as its scheme and
host (`webhook_origin`), and a refused one is not echoed back.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args
from urllib.parse import SplitResult, urlsplit

from pydantic import AfterValidator, Field

# What each name tells (the controller's reading of its events: spotrun.control.notifications):
#   succeeded     the job ended SUCCEEDED (its command exited 0)
#   failed        the job ended FAILED (crashes past max_restarts_on_error, max_wait, a launch the cloud refuses, ...)
#   cancelled     the job ended CANCELLED (`spotrun cancel`)
#   preempted     the cloud took the job's spot instance back (a gang's: once per preemption of the job); it resumes
#   fell_back     a job that runs on spot started running on on-demand, where it last ran on spot (or had not run)
#   back_to_spot  the job started running on spot, where it last ran on on-demand
NotifyEvent = Literal["succeeded", "failed", "cancelled", "preempted", "fell_back", "back_to_spot"]
NOTIFY_EVENTS: tuple[str, ...] = get_args(NotifyEvent)
DEFAULT_NOTIFY_EVENTS: tuple[str, ...] = ("succeeded", "failed", "cancelled", "preempted", "fell_back")

MAX_WEBHOOK_CHARS = 2000
_NOT_SHOWN = "(the URL is not shown: it may hold a secret)"


def webhook_origin(url: str) -> str:
    """The webhook as it may be shown: its scheme, host and port, never its path, query or user, which may hold its
    secret."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}"


def _webhook(url: str) -> str:
    if len(url) > MAX_WEBHOOK_CHARS:
        raise ValueError(f"must be at most {MAX_WEBHOOK_CHARS} characters; got {len(url)}")
    if any(character.isspace() or not character.isprintable() for character in url):
        raise ValueError("must be a URL without spaces or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed [ of an IPv6 host
        raise ValueError(f"must be an http:// or https:// URL {_NOT_SHOWN}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must be an http:// or https:// URL {_NOT_SHOWN}")
    if not parts.hostname:
        raise ValueError(f"must name a host after {parts.scheme}://")
    if not _has_valid_port(parts):
        raise ValueError(f"must have a port from 0 to 65535 {_NOT_SHOWN}")
    return url


def _has_valid_port(parts: SplitResult) -> bool:
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        return False
    return port is None or port >= 0


def _once_each(names: list[str]) -> list[str]:
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"{name!r} is listed twice")
    return names


WebhookUrl = Annotated[str, AfterValidator(_webhook), Field(repr=False)]
NotifyEvents = Annotated[list[NotifyEvent], Field(min_length=1), AfterValidator(_once_each)]
