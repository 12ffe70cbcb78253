"""A fake AWS EC2 instance metadata service that speaks IMDSv2 only (session tokens required).

    PUT  /latest/api/token                               X-aws-ec2-metadata-token-ttl-seconds: 1..21600 -> token
    GET  /latest/meta-data/spot/instance-action          X-aws-ec2-metadata-token: <token>
    GET  /latest/meta-data/events/recommendations/rebalance

A GET without a token, or with an unknown or expired one, is answered 401; a PUT without a valid TTL 400.
The instance-action is 404 until an interruption is announced, then {"action": ..., "time": "...Z"};
the rebalance recommendation is 404 until recommended, then {"noticeTime": "...Z"}.

    with FakeImds() as imds:
        env = {"SPOTRUN_AWS_METADATA_URL": imds.url}
        reclaim_at = imds.announce_interruption("terminate", reclaim_after=120)
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from .metadata_server import FakeMetadataServer, Reply, ServedRequest, text_reply

TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TOKEN_TTL_SECONDS = 21600


def imds_time(unix_seconds: float) -> str:
    """EC2's metadata time format, whole seconds in UTC: 2026-11-22T03:13:25Z."""
    return datetime.fromtimestamp(unix_seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Interruption:
    action: str
    visible_from: float
    reclaim_at: float


class FakeImds(FakeMetadataServer):
    """AWS IMDSv2 on 127.0.0.1. Times are unix seconds; `at=None` means now."""

    def __init__(self) -> None:
        self._tokens: dict[str, float] = {}  # token -> unix time it expires
        self._interruption: _Interruption | None = None
        self._rebalance_from: float | None = None
        self._unauthorized = 0
        super().__init__()

    def announce_interruption(
        self, action: str = "terminate", *, at: float | None = None, reclaim_after: float = 120.0
    ) -> float:
        """From `at` on, instance-action says `action` (terminate|stop|hibernate) at `reclaim_after` seconds later.
        Returns that reclaim time as the source should report it (whole seconds, as EC2 writes it)."""
        visible_from = time.time() if at is None else at
        reclaim_at = float(int(visible_from + reclaim_after))
        with self._lock:
            self._interruption = _Interruption(action, visible_from, reclaim_at)
        return reclaim_at

    def recommend_rebalance(self, *, at: float | None = None) -> float:
        """From `at` on, the rebalance recommendation is present; returns its noticeTime (whole seconds)."""
        visible_from = time.time() if at is None else at
        with self._lock:
            self._rebalance_from = visible_from
        return float(int(visible_from))

    def expire_tokens(self) -> None:
        """Every token issued so far stops working now (the next GET with one is answered 401)."""
        with self._lock:
            self._tokens.clear()

    @property
    def tokens_issued(self) -> int:
        return self.request_count(TOKEN_PATH, "PUT")

    @property
    def unauthorized_answers(self) -> int:
        """GETs that came without a valid token (each was answered 401)."""
        with self._lock:
            return self._unauthorized

    def _answer(self, request: ServedRequest) -> Reply:
        if request.path == TOKEN_PATH:
            return self._issue_token(request) if request.method == "PUT" else text_reply(405, "Method Not Allowed")
        if request.method != "GET":
            return text_reply(405, "Method Not Allowed")
        with self._lock:
            if not self._token_valid(request.headers.get(TOKEN_HEADER.lower())):
                self._unauthorized += 1
                return text_reply(401, "Unauthorized")
            if request.path == INSTANCE_ACTION_PATH:
                return self._instance_action()
            if request.path == REBALANCE_PATH:
                return self._rebalance()
        return text_reply(404, "Not Found")

    def _issue_token(self, request: ServedRequest) -> Reply:
        try:
            ttl = int(request.headers.get(TOKEN_TTL_HEADER.lower(), ""))
        except ValueError:
            return text_reply(400, "Bad Request")
        if not 1 <= ttl <= MAX_TOKEN_TTL_SECONDS:
            return text_reply(400, "Bad Request")
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = time.time() + ttl
        return text_reply(200, token, {TOKEN_TTL_HEADER: str(ttl)})

    def _token_valid(self, token: str | None) -> bool:
        return token is not None and self._tokens.get(token, 0.0) > time.time()

    def _instance_action(self) -> Reply:
        interruption = self._interruption
        if interruption is None or not self._visible(interruption.visible_from):
            return text_reply(404, "Not Found")
        body = {"action": interruption.action, "time": imds_time(interruption.reclaim_at)}
        return Reply(200, json.dumps(body).encode(), {"Content-Type": "text/plain"})

    def _rebalance(self) -> Reply:
        if not self._visible(self._rebalance_from):
            return text_reply(404, "Not Found")
        assert self._rebalance_from is not None
        body = {"noticeTime": imds_time(self._rebalance_from)}
        return Reply(200, json.dumps(body).encode(), {"Content-Type": "text/plain"})
