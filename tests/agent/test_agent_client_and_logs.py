"""ControllerClient retry rules and LogShipper chunking, against the recording controller."""

from __future__ import annotations

import time

import pytest

from spotrun.agent.client import Backoff, ControllerClient, Delivery
from spotrun.agent.gang import GangOrders
from spotrun.agent.heartbeat import Heartbeat
from spotrun.agent.logs import LogShipper, dropped_output_line, split_chunk

from .conftest import ATTEMPT_ID, TOKEN, RecordingController, free_port


def client_for(url: str, attempt_id: int = ATTEMPT_ID) -> ControllerClient:
    return ControllerClient(url, TOKEN, attempt_id, request_timeout=2.0, backoff_initial=0.01, backoff_max=0.05)


def test_5xx_is_retried_until_delivered(controller: RecordingController):
    controller.fail_before["started"] = 3
    assert client_for(controller.url).post("started", {"address": "a"}) is Delivery.DELIVERED
    assert [r.body for r in controller.of("started")] == [{"address": "a"}]


def test_4xx_is_not_retried_and_409_is_a_final_answer(controller: RecordingController):
    assert client_for(controller.url, attempt_id=999).post("started", {}) is Delivery.REJECTED  # 404

    controller.force_status["exit"] = 409
    assert client_for(controller.url).post("exit", {"outcome": "succeeded"}) is Delivery.CONFLICT
    assert len(controller.of("exit")) == 1


def test_unreachable_controller_gives_up_only_at_the_deadline():
    client = client_for(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    assert client.post("heartbeat", {}, give_up_at=started + 0.3) is Delivery.GAVE_UP
    assert 0.25 <= time.monotonic() - started < 2.0
    assert client.post("heartbeat", {}, retry=False) is Delivery.GAVE_UP


def test_backoff_delays_are_jittered_below_the_doubling_ceiling():
    """Every agent's client drew the same delays: after a controller restart they all retried in lockstep."""
    backoffs = [Backoff(0.2, 1.0) for _ in range(20)]
    rounds = [[backoff.next_delay() for backoff in backoffs] for _ in range(5)]
    for delays, ceiling in zip(rounds, [0.2, 0.4, 0.8, 1.0, 1.0]):
        assert all(0.0 <= delay <= ceiling for delay in delays)
        assert len(set(delays)) > 1


def test_a_heartbeat_answer_that_cannot_be_handled_is_skipped_and_the_heartbeat_goes_on(controller):
    """A malformed order (a generation of Infinity: int() raised OverflowError) ended the heartbeat thread."""
    controller.replies["heartbeat"] = {"gang": {"generation": float("inf"), "state": "running", "master_addr": "a",
                                                "master_port": 1, "node_rank": 0, "nnodes": 2}}
    orders = GangOrders()
    heartbeat = Heartbeat(client_for(controller.url), 0.05, lambda: None, orders.on_heartbeat_reply).start()
    try:
        controller.wait_for(lambda: len(controller.of("heartbeat")) >= 3, timeout=5)
    finally:
        heartbeat.stop()
    assert orders.current is None


def test_a_heartbeat_goes_on_whatever_its_answers_handler_raises(controller):
    def broken(reply):
        raise RuntimeError("a bug in a handler")

    heartbeat = Heartbeat(client_for(controller.url), 0.05, lambda: None, broken).start()
    try:
        controller.wait_for(lambda: len(controller.of("heartbeat")) >= 3, timeout=5)
    finally:
        heartbeat.stop()


@pytest.mark.parametrize(
    ("text", "limit", "head"),
    [("hello", 10, "hello"), ("hello", 3, "hel"), ("aé", 2, "a"), ("éé", 4, "éé"), ("日本", 5, "日")],
)
def test_split_chunk_never_cuts_a_character(text, limit, head):
    assert split_chunk(text, limit) == (head, text[len(head) :])


def test_shipper_cuts_large_output_into_contiguous_chunks(controller: RecordingController):
    shipper = LogShipper(client_for(controller.url), interval=0.05, max_chunk_bytes=8).start()
    shipper.write("ünïcödé text that spans chunks\n")
    assert shipper.close(timeout=5)
    offsets = [r.body["offset"] for r in controller.of("logs")]
    assert len(offsets) > 3 and offsets == sorted(set(offsets))
    assert controller.log_text() == "ünïcödé text that spans chunks\n"
    assert shipper.offset == len(controller.log)


def test_a_backlog_of_full_chunks_ships_at_once_not_one_chunk_per_interval(controller: RecordingController):
    """One chunk went out per interval (256 KiB each 0.5 s): a trainer writing faster than that, or the backlog of a
    controller that was away, piled up to the memory cap and was dropped, though the controller took each chunk at
    once. Output less than a chunk still waits for the interval, to be sent in one."""
    shipper = LogShipper(client_for(controller.url), interval=30.0, max_chunk_bytes=1000)
    shipper.write("x" * 5500)
    shipper.start()
    controller.wait_for(lambda: len(controller.of("logs")) == 5, timeout=5)
    assert controller.log_text() == "x" * 5000
    assert shipper.close(timeout=5)
    assert controller.log_text() == "x" * 5500


def test_a_refused_chunk_is_dropped_without_moving_the_offset(controller: RecordingController):
    controller.force_status["logs"] = 422
    shipper = LogShipper(client_for(controller.url), interval=0.05).start()
    shipper.write("refused\n")
    controller.wait_for(lambda: len(controller.of("logs")) == 1)
    del controller.force_status["logs"]
    shipper.write("kept\n")
    assert shipper.close(timeout=5)
    assert [r.body for r in controller.of("logs")] == [
        {"offset": 0, "data": "refused\n"},
        {"offset": 0, "data": "kept\n"},
    ]
    assert controller.log_text() == "kept\n"


def test_a_backlog_of_many_writes_is_cut_into_full_chunks_from_its_front():
    """Each chunk is taken from the front of the backlog, packed to the limit and never cutting a character; the
    rest is left as written (joining all of it for every chunk made a 50 MB backlog ship at about 2 MB/s)."""
    shipper = LogShipper(client=None, max_chunk_bytes=1000)  # type: ignore[arg-type]  (nothing is sent here)
    pieces = [("é" * 37 + "abc\n") * (index % 5 + 1) for index in range(400)]
    for piece in pieces:
        shipper.write(piece)
    chunks = []
    while chunk := shipper._next_chunk():
        chunks.append(chunk)
        shipper._in_flight = None
    assert "".join(chunks) == "".join(pieces)
    sizes = [len(chunk.encode("utf-8")) for chunk in chunks]
    assert max(sizes) <= 1000 and min(sizes[:-1]) >= 999  # full but for a 2-byte character that did not fit


def test_output_past_the_memory_cap_drops_the_oldest_and_says_so_where_it_was_cut():
    shipper = LogShipper(client=None, max_chunk_bytes=1000, max_pending_chars=100)  # type: ignore[arg-type]
    for letter in "abc":
        shipper.write(letter * 60)
    chunk = shipper._next_chunk()
    assert chunk == dropped_output_line(80) + "b" * 40 + "c" * 60
    assert "80 characters of output were dropped" in chunk
    shipper._in_flight = None
    shipper.write("d" * 250)  # one write larger than the cap keeps its newest part
    assert shipper._next_chunk() == dropped_output_line(150) + "d" * 100


def test_a_controller_that_was_away_gets_the_newest_output_after_a_line_naming_the_gap(controller):
    controller.fail_before["logs"] = 10**6  # every chunk fails until the controller is back
    shipper = LogShipper(
        client_for(controller.url), interval=0.01, backoff=Backoff(0.01, 0.02), max_pending_chars=5000
    ).start()
    shipper.write("first\n")
    time.sleep(0.2)  # "first" is in flight, being retried
    lines = [f"line {index:05d}\n" for index in range(2000)]
    for line in lines:
        shipper.write(line)
    with controller.lock:
        controller.fail_before["logs"] = 0
    assert shipper.close(timeout=10)
    text = controller.log_text()
    kept = "".join(lines)[-5000:]
    assert text.startswith("first\n[spotrun agent: ") and text.endswith(kept)
    dropped = len("".join(lines)) - 5000
    assert text == "first\n" + dropped_output_line(dropped) + kept


def test_a_second_boot_ships_its_output_after_what_the_first_boot_stored(controller: RecordingController):
    """The instance booted again for the same attempt: its agent's stream started at 0, and the store took its
    output, up to the first boot's size, for retries of the first boot's chunks, and dropped it."""
    controller.log += b"boot 1 line 1\nboot 1 line 2\n"
    shipper = LogShipper(client_for(controller.url), interval=0.05).start()
    shipper.write("boot 2 line 1\n")
    assert shipper.close(timeout=5)
    assert [probe.body for probe in controller.log_probes] == [{"offset": 0, "data": ""}]
    assert [r.body["offset"] for r in controller.of("logs")] == [28]
    assert controller.log_text() == "boot 1 line 1\nboot 1 line 2\nboot 2 line 1\n"


def test_the_first_chunk_waits_for_the_controller_to_say_where_the_log_ends(controller: RecordingController):
    controller.fail_before["logs"] = 2  # the probe is not answered twice
    shipper = LogShipper(client_for(controller.url), interval=0.05, backoff=Backoff(0.01, 0.02)).start()
    shipper.write("first\n")
    assert shipper.close(timeout=5)
    assert controller.log_text() == "first\n" and len(controller.log_probes) == 1
