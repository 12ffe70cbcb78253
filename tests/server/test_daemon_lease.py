"""The controller lease while a daemon ticks: a tick longer than the lease's life keeps it."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest

from spotrun.server import daemon as daemon_module
from spotrun.server.daemon import Daemon, live_controller_url, live_worker_url


class SlowController:
    def __init__(self, ticking: threading.Event, release: threading.Event) -> None:
        self.ticking, self.release = ticking, release

    def tick(self) -> None:
        self.ticking.set()
        self.release.wait(10)  # a slow cloud call in the tick


@contextmanager
def first_daemon_ticking(store) -> Iterator[Daemon]:
    """A daemon holding the lease whose tick hangs until the block ends; a second daemon, for the block."""
    first, second = Daemon(store, tick_interval=0.05, idle_exit=0), Daemon(store, tick_interval=0.05, idle_exit=0)
    assert first._take_lease("http://first")
    ticking, release = threading.Event(), threading.Event()
    loop = threading.Thread(target=first._loop, args=(SlowController(ticking, release), "http://first"))
    loop.start()
    try:
        assert ticking.wait(10)
        yield second
    finally:
        first.stop()
        release.set()
        loop.join(15)


def test_a_tick_longer_than_the_lease_keeps_it(store, tmp_path, monkeypatch):
    """The lease was renewed only between ticks: in a long one (many jobs, slow cloud calls) it lapsed, the CLI saw
    no live controller, and a second daemon took the lease while the first still drove the jobs."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(daemon_module, "LEASE_TTL", 0.5)
    with first_daemon_ticking(store) as second:
        time.sleep(1.0)  # the tick outlasts the lease's life
        assert live_controller_url(store) == "http://first"
        assert not second._take_lease("http://second"), "two daemons both hold the controller lease"


def test_a_taken_controller_port_stops_the_daemon_saying_so_instead_of_serving_another(store, tmp_path, monkeypatch,
                                                                                        caplog):
    """SPOTRUN_CONTROLLER_URL tells agents to report to SPOTRUN_CONTROLLER_PORT: with that port taken, the daemon
    served another one, and every agent went unheard."""
    import socket

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(daemon_module, "PORT_WAIT_SECONDS", 0.5)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("SPOTRUN_CONTROLLER_PORT", str(port))
        monkeypatch.setenv("SPOTRUN_CONTROLLER_URL", f"http://10.0.0.5:{port}")
        assert Daemon(store, tick_interval=0.05, idle_exit=0.1).run() == 2
    assert f"cannot serve the agent API on 127.0.0.1:{port} (SPOTRUN_CONTROLLER_PORT)" in caplog.text
    assert live_controller_url(store) is None  # the lease was given back


def test_a_tick_stuck_in_one_drive_lets_the_lease_go(store, tmp_path, monkeypatch):
    """A tick stuck in a cloud call without timeout kept the lease renewed for ever (the claims' keeper gives them
    up after 10 claim lives): no other daemon could take over, and no job was driven."""
    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(daemon_module, "LEASE_TTL", 0.3)
    monkeypatch.setattr(daemon_module, "LEASE_GIVE_UP", 1.0)
    with first_daemon_ticking(store) as second:
        deadline = time.monotonic() + 10  # the lease goes once the give-up bound and a lease's life are past (1.3 s)
        while not second._take_lease("http://second"):
            assert time.monotonic() < deadline, "a stuck tick still holds the lease"
            time.sleep(0.05)


def test_a_controller_port_given_back_within_the_wait_is_taken(store, tmp_path, monkeypatch):
    """A daemon started just as the one it replaces gave up the lease found that one's port still bound and exited;
    it now waits a little for it."""
    import socket

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    previous = socket.socket()
    previous.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    previous.bind(("127.0.0.1", 0))
    previous.listen()
    port = previous.getsockname()[1]
    monkeypatch.setenv("SPOTRUN_CONTROLLER_PORT", str(port))
    threading.Timer(0.5, previous.close).start()  # the old controller's process ends
    sock = daemon_module._bind_agent_socket(store)
    try:
        assert sock.getsockname()[1] == port
    finally:
        sock.close()


class IdleController:
    def tick(self) -> None:
        pass


def test_a_job_submitted_as_the_daemon_decides_to_exit_is_driven_by_it(store, tmp_path, monkeypatch):
    """`spotrun launch` stores the job, then takes the live controller's URL from the lease (`ensure_running`). A
    daemon that had just found no work exited after that read: the launch trusted a controller that was gone, and
    the job waited for whichever command next started one."""
    from spotrun.state import Job

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    daemon = Daemon(store, tick_interval=0.02, idle_exit=1e-6)  # its first look without work decides its exit
    assert daemon._take_lease("http://daemon")
    found_work, told = daemon._has_work, []

    def has_work_then_a_launch() -> bool:
        busy = found_work()
        if not told:  # between the daemon's look and its exit: a launch stores its job and reads the lease
            with store.session() as session:
                session.add(Job(name="j", owner="local", spec={}, state="PENDING", created_at=0.0, updated_at=0.0))
            told.append(live_controller_url(store))
        return busy

    monkeypatch.setattr(daemon, "_has_work", has_work_then_a_launch)
    loop = threading.Thread(target=daemon._loop, args=(IdleController(), "http://daemon"))
    loop.start()
    try:
        time.sleep(0.5)
        assert told == ["http://daemon"]
        assert loop.is_alive(), "the daemon the launch was told of exited, leaving its job without a controller"
        assert live_controller_url(store) == "http://daemon"
    finally:
        daemon.stop()
        loop.join(5)


def _announce(store, worker: str, url: str, ttl: float = 60.0) -> None:
    from spotrun.state import workers
    from spotrun.state.db_clock import database_now

    with store.session() as session:
        workers.announce(session, worker, url, database_now(session), ttl)


def _no_daemon_may_start(monkeypatch) -> list[object]:
    started: list[object] = []
    monkeypatch.setattr(daemon_module.subprocess, "Popen", lambda *args, **kwargs: started.append(args))
    monkeypatch.setattr(daemon_module, "START_TIMEOUT", 0.2)
    return started


def test_a_cancel_on_a_team_servers_store_starts_no_daemon_of_its_own(store, tmp_path, monkeypatch):
    """`spotrun cancel` on the store a team server drives started an embedded daemon, which then claimed the
    server's new jobs (and ran their local ones on this machine): a live worker of the server's acts on the cancel."""
    from spotrun.cli.embedded import EmbeddedBackend
    from spotrun.state import Job

    monkeypatch.setenv("SPOTRUN_HOME", str(tmp_path / "home"))
    started = _no_daemon_may_start(monkeypatch)
    with store.session() as session:
        job = Job(name="j", owner="alice", spec={}, state="PENDING", created_at=0.0, updated_at=0.0)
        session.add(job)
        session.flush()
        job_id = job.id
    _announce(store, f"{socket.gethostname()}:{os.getpid()}:server", "http://trainbox:8080")
    assert EmbeddedBackend(store).cancel(job_id)
    assert started == []
    with store.session() as session:
        assert session.get(Job, job_id).cancel_requested


def test_only_a_live_workers_announcement_counts_as_a_controller(store, monkeypatch):
    gone = psutil.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _announce(store, f"{socket.gethostname()}:{gone.pid}:killed", "http://killed:1")  # a server SIGKILLed here
    _announce(store, "elsewhere:1:expired", "http://expired:1", ttl=-1.0)
    assert live_worker_url(store) is None
    started = _no_daemon_may_start(monkeypatch)
    with pytest.raises(daemon_module.ControllerDidNotStart):
        daemon_module.ensure_running(store, any_worker=True)
    assert len(started) == 1, "no live worker: the cancel's daemon starts as before"
    _announce(store, "another-host:77:server", "http://elsewhere:8080")  # another machine's: taken as live
    assert live_worker_url(store) == "http://elsewhere:8080"
    assert live_controller_url(store) is None  # a launch still starts its own daemon beside a server (docs/server.md)
