"""Posting one notification to a webhook: its body (Slack's incoming-webhook text for hooks.slack.com, spotrun's JSON
elsewhere), one POST with a short timeout, and the answer read as told, worth another try, or refused for good.

Nothing here names the webhook beyond its scheme and host (`webhook_origin`): its path is a credential.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import httpx

from spotrun.costs.ledger import format_dollars, unpriced_note
from spotrun.spec.notify import webhook_origin

SLACK_HOST = "hooks.slack.com"
TIMEOUT_SECONDS = 10.0
# answers worth another try: the receiver's own trouble, or its asking to slow down; any other 4xx (and a redirect,
# which is not followed) says the webhook is wrong, which no retry mends
_TRANSIENT_STATUSES = frozenset({408, 425, 429})

_HEADLINES = {
    "succeeded": "succeeded", "failed": "failed", "cancelled": "was cancelled", "preempted": "was preempted",
    "fell_back": "fell back to on-demand", "back_to_spot": "is back on spot",
}


@dataclass(frozen=True)
class JobNews:
    """What one notification tells: the happening, and the job as it stood when it was found."""

    event_id: int  # the store's event: a receiver told twice (after a controller restart) can tell the repeat
    event: str  # the notification name (`spec.notify.NOTIFY_EVENTS`)
    message: str  # the event's own words
    at: float  # UNIX seconds of the event
    job_id: int
    job_name: str
    owner: str
    state: str
    cost: float  # dollars charged so far
    unpriced_attempts: int  # left out of `cost`: stored at a price no instance has (`ledger.priced`)


@dataclass(frozen=True)
class Outcome:
    told: bool
    retry: bool  # not told, but another try may succeed
    reason: str  # why not told, without the URL: "HTTP 503", "ConnectTimeout"


TOLD = Outcome(told=True, retry=False, reason="")


def body(news: JobNews, url: str) -> dict[str, Any]:
    """Slack's {"text": ...} for a Slack incoming webhook, else the news as JSON."""
    if urlsplit(url).hostname == SLACK_HOST:
        return {"text": slack_text(news)}
    return {
        "event_id": news.event_id, "event": news.event, "message": news.message, "time": iso_time(news.at),
        "job_id": news.job_id, "job_name": news.job_name, "owner": news.owner, "state": news.state,
        "cost": round(news.cost, 6), "unpriced_attempts": news.unpriced_attempts,
    }


def slack_text(news: JobNews) -> str:
    headline = f"spotrun job {news.job_id} ({news.job_name}, {news.owner}) {_HEADLINES.get(news.event, news.event)}"
    details = f"{news.message}\nstate {news.state}, cost so far {format_dollars(news.cost)}, at {iso_time(news.at)}"
    return _slack_escaped(f"{headline}\n{details}{_left_out_of_the_cost(news.unpriced_attempts)}")


def _left_out_of_the_cost(unpriced_attempts: int) -> str:
    """A line under the cost saying what it leaves out, in `spotrun cost`'s words (`ledger.unpriced_note`), or
    nothing."""
    note = unpriced_note(unpriced_attempts)
    return "\n" + note.removeprefix("; ") if note else ""


def iso_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _slack_escaped(text: str) -> str:
    """Slack reads <...> as links and mentions and & as the start of an entity: its own three escapes."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def post(url: str, payload: dict[str, Any], timeout: float = TIMEOUT_SECONDS) -> Outcome:
    """POST `payload` as JSON once; never raises for what the webhook or the network does."""
    posting = _posting.set(True)
    try:
        response = _client().post(url, json=payload, timeout=timeout)
    except (httpx.HTTPError, httpx.InvalidURL) as error:  # neither's text is shown: it may quote the URL
        return Outcome(told=False, retry=True, reason=type(error).__name__)
    finally:
        _posting.reset(posting)
    if response.is_success:
        return TOLD
    status = response.status_code
    return Outcome(told=False, retry=status >= 500 or status in _TRANSIENT_STATUSES, reason=f"HTTP {status}")


@cache
def _client() -> httpx.Client:
    """One client for every post (it is safe across threads): a new one's TLS set-up costs ~0.1 s."""
    return httpx.Client(headers={"User-Agent": "spotrun"})


_posting: ContextVar[bool] = ContextVar("posting_to_a_webhook", default=False)


class _WebhookUrlsHidden(logging.Filter):
    """httpx logs every request's URL (INFO, "HTTP Request: POST <url> ..."): a webhook's is logged as its scheme and
    host only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _posting.get() and isinstance(record.args, tuple):
            record.args = tuple(webhook_origin(str(arg)) if isinstance(arg, httpx.URL) else arg for arg in record.args)
        return True


logging.getLogger("httpx").addFilter(_WebhookUrlsHidden())
