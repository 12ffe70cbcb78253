"""Ships the attempt's output to the controller as /logs chunks keyed by byte offset.

Output is batched every `interval`; a backlog of full chunks goes out without waiting. A chunk that fails is re-sent
unchanged (same offset, same data) until the controller answers, so a server that ignores offsets it already holds
never loses or duplicates a byte. Offsets count UTF-8 bytes of the text stored; a chunk the controller refuses (4xx)
is dropped without moving the offset.

While the controller cannot be reached, output waits in memory, up to MAX_PENDING_CHARS. Past that the oldest
waiting output is dropped (the newest is what explains a failure), and a line in the log says how much went where.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from spotrun.agent.client import Backoff, ControllerClient, Delivery

log = logging.getLogger(__name__)

DEFAULT_MAX_CHUNK_BYTES = 256 * 1024
MAX_PENDING_CHARS = 32 * 1024 * 1024


def dropped_output_line(dropped_chars: int) -> str:
    return (
        f"[spotrun agent: {dropped_chars} characters of output were dropped here: the controller could not be "
        "reached and the agent keeps only the newest output in memory; the agent's own stdout on the instance "
        "has all of it]\n"
    )


def split_chunk(text: str, max_bytes: int) -> tuple[str, str]:
    """(head, rest) where head is the longest prefix of text whose UTF-8 encoding fits max_bytes. Only the first
    max_bytes characters are encoded (they hold at least max_bytes bytes, when there are more): not the rest."""
    window = text[:max_bytes]
    encoded = window.encode("utf-8")
    if len(encoded) <= max_bytes and len(window) == len(text):
        return text, ""
    head = encoded[:max_bytes].decode("utf-8", errors="ignore")  # drops a multi-byte char cut in half
    return head, text[len(head) :]


class LogShipper:
    def __init__(
        self,
        client: ControllerClient,
        interval: float = 0.5,
        max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
        backoff: Backoff | None = None,
        max_pending_chars: int = MAX_PENDING_CHARS,
    ) -> None:
        if max_chunk_bytes < 4:
            raise ValueError(f"max_chunk_bytes must hold one UTF-8 character (>= 4), got {max_chunk_bytes}")
        if max_pending_chars < 1:
            raise ValueError(f"max_pending_chars must be at least 1, got {max_pending_chars}")
        self._client = client
        self._interval = interval
        self._max_chunk_bytes = max_chunk_bytes
        self._backoff = backoff or Backoff()
        self._lock = threading.Condition()
        self._pending: deque[str] = deque()
        self._pending_chars = 0
        self._max_pending_chars = max_pending_chars
        self._dropped_chars = 0  # from the front of pending, since the last chunk was cut
        self._in_flight: str | None = None
        self._offset = 0
        self._offset_known = False  # asked of the controller before the first chunk (`_stored_size`)
        self._closing = False
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._ship_forever, name="spotrun-logs", daemon=True)

    @property
    def offset(self) -> int:
        """Bytes the controller has acknowledged so far."""
        with self._lock:
            return self._offset

    def start(self) -> LogShipper:
        self._thread.start()
        return self

    def write(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._pending.append(text)
            self._pending_chars += len(text)
            self._drop_oldest_past_the_cap()

    def _drop_oldest_past_the_cap(self) -> None:
        excess = self._pending_chars - self._max_pending_chars
        if excess > 0 and not self._dropped_chars:
            log.warning("the controller is not taking output: keeping only its newest %d characters", self._max_pending_chars)
        while excess > 0:
            oldest = self._pending.popleft()
            if len(oldest) > excess:
                self._pending.appendleft(oldest[excess:])
            cut = min(excess, len(oldest))
            self._pending_chars -= cut
            self._dropped_chars += cut
            excess -= cut

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything written so far is shipped (or refused); False when the timeout passed first."""
        with self._lock:
            self._lock.notify_all()
            return self._lock.wait_for(lambda: not self._pending and self._in_flight is None, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Ship everything written so far, then stop; False when the timeout passed first (shipping goes on,
        and a shipper not started yet ships everything once started)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        return self._finished.wait(timeout)

    def _ship_forever(self) -> None:
        while True:
            with self._lock:
                if not self._closing and not self._a_chunk_is_full():  # a backlog goes out at once, chunk after chunk
                    self._lock.wait(self._interval)
                chunk = self._next_chunk()
                if chunk is None and self._closing:
                    self._finished.set()
                    return
            if chunk is None:
                continue
            if self._send(chunk):
                self._backoff.reset()
            else:
                with self._lock:  # a close wakes it once: the last chunks go out without waiting out the backoff
                    self._lock.wait(self._backoff.next_delay())

    def _a_chunk_is_full(self) -> bool:
        """Pending output fills a chunk (each character is a byte at least); called under the lock."""
        return self._pending_chars >= self._max_chunk_bytes

    def _stored_size(self) -> int | None:
        """Where the attempt's stored log ends, or None when the controller did not answer. A second boot of the
        instance (the agent again, for the same attempt) starts its stream there: from 0, its output up to the
        first boot's size was taken for retries of the first boot's chunks, and dropped."""
        answers: list[dict] = []
        delivery = self._client.post("logs", {"offset": 0, "data": ""}, retry=False, on_reply=answers.append)
        if not delivery.final:
            return None
        return int(answers[0].get("size", 0)) if delivery is Delivery.DELIVERED and answers else 0

    def _next_chunk(self) -> str | None:
        """The chunk in flight (a retry) or the next one cut from the front of pending output (the rest is not
        touched: joining it all for every chunk made shipping a backlog quadratic); called under the lock."""
        if self._in_flight is None and self._dropped_chars:
            self._pending.appendleft(dropped_output_line(self._dropped_chars))
            self._pending_chars += len(self._pending[0])
            self._dropped_chars = 0
        if self._in_flight is None and self._pending:
            parts, room = [], self._max_chunk_bytes
            while self._pending and room > 0:
                head, rest = split_chunk(self._pending.popleft(), room)
                self._pending_chars -= len(head)
                if rest:
                    self._pending.appendleft(rest)
                if not head:
                    break  # a character larger than the room left: it opens the next chunk
                parts.append(head)
                room -= len(head.encode("utf-8"))
            self._in_flight = "".join(parts)
        return self._in_flight

    def _send(self, chunk: str) -> bool:
        if not self._offset_known:
            size = self._stored_size()
            if size is None:
                return False
            with self._lock:
                self._offset, self._offset_known = size, True
        with self._lock:
            offset = self._offset
        delivery = self._client.post("logs", {"offset": offset, "data": chunk}, retry=False)
        if not delivery.final:
            return False
        with self._lock:
            if delivery is Delivery.DELIVERED:
                self._offset += len(chunk.encode("utf-8"))
            else:
                # Not stored: keep the offset, so the next chunk still lands where the controller's log ends.
                log.error("log chunk at offset %d (%d chars) dropped: the controller refused it", offset, len(chunk))
            self._in_flight = None
            self._lock.notify_all()
        return True
