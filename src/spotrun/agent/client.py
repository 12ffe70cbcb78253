"""HTTP calls to the controller's agent API, retried while the controller is away.

Connection errors, timeouts and 5xx answers are retried with exponential backoff and full jitter (the controller
may be restarting, and the agents of every attempt must not all come back to it at the same moments). 409 is a
final answer (the controller already holds a conflicting or identical record).
Any other 4xx is logged and not retried. The token goes only into the Authorization header, never a log.

Where several controller workers share the store, each retry after such a failure goes to the next worker the agent
knows of (from its boot configuration, then from the answers to its heartbeats: `state.workers`): the worker that
launched the instance may be gone for good, and another takes its jobs over.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx

log = logging.getLogger(__name__)


class Delivery(enum.Enum):
    DELIVERED = "delivered"
    CONFLICT = "conflict"  # 409
    REJECTED = "rejected"  # another 4xx: retrying would not help
    GAVE_UP = "gave_up"  # still failing when the deadline passed or stop was asked

    @property
    def final(self) -> bool:
        """The controller answered; sending the same request again would not change anything."""
        return self is not Delivery.GAVE_UP


class Backoff:
    """Delays drawn at random up to initial, 2*initial, ... capped at maximum ("full jitter"): agents that lost the
    controller together spread their retries instead of coming back in lockstep."""

    def __init__(self, initial: float = 0.2, maximum: float = 5.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def reset(self) -> None:
        self._next = self.initial

    def next_delay(self) -> float:
        ceiling = self._next
        self._next = min(self._next * 2, self.maximum)
        return random.uniform(0.0, ceiling)


class ControllerClient:
    def __init__(
        self,
        controller_url: str,
        token: str,
        attempt_id: int,
        *,
        alternates: Iterable[str] = (),
        request_timeout: float = 10.0,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = f"/agent/v1/attempts/{attempt_id}"
        self._controllers = Controllers(controller_url, alternates)
        self._http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=request_timeout)
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._clock = clock

    def close(self) -> None:
        self._http.close()

    def learn_controllers(self, urls: object) -> None:
        """The controller workers an answer names (a heartbeat's `controllers`): where to go should this one fail."""
        self._controllers.learn(urls)

    def post(
        self,
        endpoint: str,
        body: dict[str, Any],
        *,
        retry: bool = True,
        give_up_at: float | None = None,
        stop: threading.Event | None = None,
        on_reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> Delivery:
        """POST body to the attempt's endpoint; retry transient failures until give_up_at (monotonic) or stop."""
        return self._send("POST", endpoint, body, retry=retry, give_up_at=give_up_at, stop=stop, on_reply=on_reply)

    def get(self, endpoint: str, *, on_reply: Callable[[dict[str, Any]], None]) -> Delivery:
        """GET the attempt's endpoint, handing its JSON answer to on_reply; retry transient failures until answered."""
        return self._send("GET", endpoint, None, retry=True, give_up_at=None, stop=None, on_reply=on_reply)

    def _send(
        self,
        method: str,
        endpoint: str,
        body: dict[str, Any] | None,
        *,
        retry: bool,
        give_up_at: float | None,
        stop: threading.Event | None,
        on_reply: Callable[[dict[str, Any]], None] | None,
    ) -> Delivery:
        backoff = Backoff(self._backoff_initial, self._backoff_max)
        failures = 0
        while True:
            outcome = self._send_once(method, endpoint, body, on_reply)
            if outcome is not None:
                if failures:
                    log.info("%s %s delivered after %d failed tries", method, endpoint, failures)
                return outcome
            failures += 1
            if failures == 1 and retry:
                log.warning("controller unreachable for %s %s; retrying with backoff", method, endpoint)
            if not retry:
                return Delivery.GAVE_UP
            delay = backoff.next_delay()
            if give_up_at is not None:
                left = give_up_at - self._clock()
                if left <= 0:
                    return Delivery.GAVE_UP
                delay = min(delay, left)
            if stop is not None:
                if stop.wait(delay):
                    return Delivery.GAVE_UP
            else:
                time.sleep(delay)

    def _send_once(
        self,
        method: str,
        endpoint: str,
        body: dict[str, Any] | None,
        on_reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> Delivery | None:
        """The final Delivery, or None when the failure is transient."""
        controller = self._controllers.current()
        try:
            response = self._http.request(method, f"{controller}{self._path}/{endpoint}", json=body)
        except httpx.HTTPError as exc:
            log.debug("%s %s failed: %s", method, endpoint, type(exc).__name__)
            self._controllers.failed(controller)
            return None
        status = response.status_code
        if status < 300:
            if on_reply is not None:
                _hand_reply(response, on_reply)
            return Delivery.DELIVERED
        if status >= 500:
            log.debug("%s %s answered %d; will retry", method, endpoint, status)
            self._controllers.failed(controller)
            return None
        if status == 409:
            log.info("%s %s answered 409 (conflict): %s", method, endpoint, response.text[:200])
            return Delivery.CONFLICT
        log.error("%s %s rejected with %d: %s", method, endpoint, status, response.text[:200])
        return Delivery.REJECTED


class Controllers:
    """The controller workers' URLs an agent knows, the one it reports to first. Shared by the agent's threads: a
    failure moves them all on to the next URL, once (two threads failing on the same one move it once)."""

    MAX_KNOWN = 16

    def __init__(self, first: str, others: Iterable[str] = ()) -> None:
        self._urls = list(dict.fromkeys(url.rstrip("/") for url in [first, *others]))
        self._lock = threading.Lock()

    def current(self) -> str:
        with self._lock:
            return self._urls[0]

    def failed(self, url: str) -> None:
        """`url` did not answer: the next one known is tried from now on (it goes last)."""
        with self._lock:
            if len(self._urls) > 1 and self._urls[0] == url:
                self._urls.append(self._urls.pop(0))
                log.warning("controller at %s unreachable; reporting to %s from now on", url, self._urls[0])

    def learn(self, urls: object) -> None:
        """The live workers as a controller answered them; the current one stays first. Anything but a list of
        http(s) URLs is ignored (a controller's bug must not cost the agent the URLs it knows)."""
        if not isinstance(urls, list) or not all(isinstance(url, str) and _is_http(url) for url in urls):
            return
        with self._lock:
            current = self._urls[0]
            self._urls = list(dict.fromkeys([current, *(url.rstrip("/") for url in urls)]))[: self.MAX_KNOWN]


def _is_http(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def _hand_reply(response: httpx.Response, on_reply: Callable[[dict[str, Any]], None]) -> None:
    try:
        reply = response.json()
    except ValueError:
        log.warning("the controller's answer is not JSON: %r", response.text[:200])
        return
    if isinstance(reply, dict):
        on_reply(reply)
