"""The controller daemon: holds the controller lease in the store, ticks the controller, serves the agent API.

`ensure_running()` is what the CLI calls: it reuses the live controller named by the lease, or starts one in the
background, so `spotrun launch` works with nothing started first.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Annotated, Any, get_type_hints

import psutil
import uvicorn
from pydantic import BeforeValidator, Field, HttpUrl, TypeAdapter, ValidationError

from spotrun import config
from spotrun.agent.config import http_url
from spotrun.config import InvalidSetting
from spotrun.control import reclaims
from spotrun.control.controller import Controller, ControllerSettings
from spotrun.control.heard import HeardAgents
from spotrun.control.states import LIVE, state_names
from spotrun.pydantic_messages import error_message
from spotrun.server.agent_api import create_agent_app
from spotrun.state import Job, Setting, Store, claims, lease, workers
from spotrun.state.db_clock import database_now

LEASE_NAME = "controller"
LEASE_TTL = 10.0
# A tick whose current drive has run this long is stuck (as `ClaimKeeper`'s give_up_after, 10 claim lives): its lease
# is no longer renewed, so that another daemon can take over.
LEASE_GIVE_UP = 300.0
DEAD_CLAIMS_EVERY_TICKS = 20
PORT_SETTING = "agent_api_port"
PORT_WAIT_SECONDS = 5.0  # how long a daemon waits for the port SPOTRUN_CONTROLLER_PORT sets to be given back
START_TIMEOUT = 30.0  # how long `ensure_running` waits for the controller it started to take the lease
AgentPort = Annotated[int, Field(ge=1, le=65535)]
# A URL agents are told to report to: one an agent takes (its own check, which asks the scheme as written) and a URL.
AgentUrl = Annotated[HttpUrl, BeforeValidator(http_url)]

log = logging.getLogger("spotrun.daemon")


def from_env(name: str, kind: Any, *, secret: bool = False) -> Any:
    """Environment variable `name` as `kind` (a type with its bounds, which pydantic checks); None when unset or empty.
    A `secret` value is not shown in the refusal (it goes to the terminal and the logs)."""
    text = os.environ.get(name)
    return checked_setting(name, text, kind, secret=secret) if text else None


def checked_setting(name: str, text: str, kind: Any, *, secret: bool = False) -> Any:
    """`text`, the value setting `name` was given, as `kind` (else InvalidSetting naming both, as `from_env`)."""
    try:
        return TypeAdapter(kind).validate_strings(text)
    except ValidationError as invalid:
        shown = "<not shown>" if secret else repr(text)
        raise InvalidSetting(f"{name}={shown} is refused: {error_message(invalid.errors()[0])}") from None


def settings_from_env(url: str) -> ControllerSettings:
    """ControllerSettings with any field overridden by SPOTRUN_<FIELD> (e.g. SPOTRUN_HEARTBEAT_TIMEOUT=10), within
    the bounds its type sets (else InvalidSetting)."""
    overrides, defaults = {}, ControllerSettings(url)
    kinds = get_type_hints(ControllerSettings, include_extras=True)
    for field in fields(ControllerSettings):
        default = getattr(defaults, field.name)
        if field.name != "controller_url" and isinstance(default, (int, float, str)):
            value = from_env(f"SPOTRUN_{field.name.upper()}", kinds[field.name])
            if value is not None:
                overrides[field.name] = value
    return ControllerSettings(controller_url=url, **overrides)


def check_environment(*, tick_interval: float | None = None, idle_exit: float | None = None) -> tuple[float, float]:
    """The daemon's tick interval and idle exit: those given, else $SPOTRUN_TICK_INTERVAL's and $SPOTRUN_IDLE_EXIT's
    (0.5 s and 120 s when unset). InvalidSetting for the first SPOTRUN_* variable the daemon reads that it cannot
    use: checked at start, as one found later failed every round, or stopped the daemon holding its lease; and by
    each command that starts one (`ensure_running`, and `spotrun launch` before it stores the job)."""
    timing = (
        _option_or_env(tick_interval, "SPOTRUN_TICK_INTERVAL", "0.5", TICK_SECONDS),
        _option_or_env(idle_exit, "SPOTRUN_IDLE_EXIT", "120", IDLE_SECONDS),
    )
    settings_from_env(url="")
    from_env("SPOTRUN_CONTROLLER_PORT", AgentPort)
    from_env("SPOTRUN_CONTROLLER_URL", AgentUrl)
    _check_bind_address()
    return timing


def bind_address() -> str:
    """The address the agent API listens on: $SPOTRUN_CONTROLLER_BIND, else loopback."""
    return os.environ.get("SPOTRUN_CONTROLLER_BIND") or "127.0.0.1"


def _check_bind_address() -> None:
    """SPOTRUN_CONTROLLER_BIND is an address this machine can listen on (a socket bound to it, on any port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as trial:
        try:
            trial.bind((bind_address(), 0))
        except OSError as error:
            raise InvalidSetting(
                f"SPOTRUN_CONTROLLER_BIND={bind_address()!r} is refused: it must be an IPv4 address (or name) of this "
                f"machine to listen on ({error.strerror or error})"
            ) from None


class Daemon:
    def __init__(self, store: Store, *, tick_interval: float, idle_exit: float) -> None:
        self.store = store
        self.tick_interval = tick_interval
        self.idle_exit = idle_exit
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self.heard = HeardAgents(time.time)  # shared by this process's agent API and controller (`control.heard`)

    def run(self) -> int:
        check_environment(tick_interval=self.tick_interval, idle_exit=self.idle_exit)  # before the lease is taken
        if not self._take_lease(url=None):
            log.info("another controller holds the lease; nothing to do")
            return 0
        try:
            sock = _bind_agent_socket(self.store)
        except AgentPortTaken as taken:
            log.error("%s", taken)
            with self.store.session() as session:
                lease.release(session, LEASE_NAME, self.holder)
            return 2
        url = advertised_url(sock.getsockname()[1])
        server = uvicorn.Server(uvicorn.Config(create_agent_app(self.store, heard=self.heard), log_level="warning",
                                              access_log=False))
        threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="agent-api").start()
        self._take_lease(url)
        controller = Controller(self.store, settings_from_env(url), worker_id=self.holder, heard=self.heard)
        log.info("controller %s serving the agent API at %s", self.holder, url)
        try:
            self._loop(controller, url)
        finally:
            controller.release_claims()
            server.should_exit = True
            with self.store.session() as session:
                lease.release(session, LEASE_NAME, self.holder)
        return 0

    def run_at(self, url: str, retry_after: float = LEASE_TTL / 2) -> None:
        """Be one controller worker among any number over the same database (the team server), agents reporting
        at `url`: drive the jobs this worker claims until stop(); retry after an error (e.g. the database away)."""
        while not self._stop.is_set():
            controller = Controller(self.store, settings_from_env(url), worker_id=self.holder, heard=self.heard)
            try:
                self._loop(controller, url, hold_lease=False)
            except Exception:
                log.exception("the controller loop failed; retrying in %.0f s", retry_after)
            finally:
                controller.release_claims()
            self._stop.wait(retry_after)

    def stop(self, *_: object) -> None:
        self._stop.set()

    def _loop(self, controller: Controller, url: str, hold_lease: bool = True) -> None:
        """Tick until stop(), the lease lost or idle_exit reached. A round that fails (the database away or locked
        past its busy timeout) is logged and the next one tried: the agents report to this process, and it exiting
        left them no controller until some command started another."""
        idle_since = time.time()
        ticks = 0
        while not self._stop.is_set():
            try:
                if hold_lease and not self._take_lease(url):
                    log.error("lost the controller lease to another process; stopping")
                    return
                if ticks % DEAD_CLAIMS_EVERY_TICKS == 0:
                    self._free_claims_of_dead_workers()
                ticks += 1
                if hold_lease:
                    with self._lease_kept(url, controller):  # a tick may outlast the lease (many jobs, slow calls)
                        controller.tick()
                else:
                    controller.tick()
                busy = self._has_work()
            except Exception:
                log.exception("a controller round failed; the next starts in %.1f s", self.tick_interval)
                busy = True  # an outage is not idleness
            if busy:
                idle_since = time.time()
            elif self.idle_exit and time.time() - idle_since > self.idle_exit and self._let_go(hold_lease):
                log.info("no live jobs and no instance left to the cloud for %.0f s; exiting", self.idle_exit)
                return
            self._stop.wait(self.tick_interval)

    def _let_go(self, hold_lease: bool) -> bool:
        """Give the lease up, then look for work once more: whether the daemon may exit. A launch stores its job, then
        reads the lease (`ensure_running`): one that read it before it was given up trusts this daemon, and its job
        is found here; one after finds no controller and starts one. The next round takes the lease back."""
        if not hold_lease:
            return True
        try:
            with self.store.session() as session:
                lease.release(session, LEASE_NAME, self.holder)
            return not self._has_work()
        except Exception:
            log.exception("looking for work before exiting failed; the next round starts in %.1f s", self.tick_interval)
            return False  # an outage is not idleness

    @contextmanager
    def _lease_kept(self, url: str, controller: object = None) -> Iterator[None]:
        """The lease renewed every third of its life while the block runs: renewed only between ticks, it lapsed in
        a tick longer than LEASE_TTL, and `ensure_running` started a second controller that took it."""
        done = threading.Event()
        began = time.monotonic()

        def keep() -> None:
            while not done.wait(LEASE_TTL / 3):
                progress = max(began, getattr(controller, "drive_began", began))
                if time.monotonic() - progress > LEASE_GIVE_UP:
                    continue  # stuck in one drive: let the lease lapse, so that another daemon takes over
                try:
                    with self.store.session() as session:
                        now = database_now(session)
                        lease.try_acquire(session, LEASE_NAME, self.holder, os.getpid(), url, now, LEASE_TTL)
                except Exception:  # a locked or unreachable store: the next renewal tries again
                    log.warning("renewing the controller lease failed", exc_info=True)

        keeper = threading.Thread(target=keep, name="lease-keeper", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()
            keeper.join()

    def _take_lease(self, url: str | None) -> bool:
        with self.store.session() as session:
            if lease.try_acquire(session, LEASE_NAME, self.holder, os.getpid(), url, database_now(session), LEASE_TTL):
                return True
        with self.store.session() as session:
            current = lease.read(session, LEASE_NAME)
            dead = current.holder if current and current.holder and holder_is_dead(current.holder) else None
        if dead is None:
            return False
        log.warning("taking the controller lease over from %s, whose process is gone", dead)
        with self.store.session() as session:
            now = database_now(session)
            return lease.take_over(session, LEASE_NAME, dead, self.holder, os.getpid(), url, now, LEASE_TTL)

    def _free_claims_of_dead_workers(self) -> None:
        """Claims of a worker that died on this host need not wait for their expiry (a restart resumes at once)."""
        with self.store.session() as session:
            for holder in claims.holders(session):
                if holder != self.holder and holder_is_dead(holder):
                    log.warning("releasing the job claims of %s, whose process is gone", holder)
                    claims.release_all(session, holder)

    def _has_work(self) -> bool:
        """Live jobs, an instance left for the cloud to take back, which is terminated if the cloud does not, or an
        ended job's notifications still to tell (given up after a bound: `control.notifier`)."""
        with self.store.session() as session:
            if session.query(Job.id).filter(Job.state.in_(state_names(LIVE))).first() is not None:
                return True
            if session.query(Job.id).filter(Job.notified_event_id.is_not(None)).first() is not None:
                return True
            return bool(reclaims.awaiting_ids(session))


def holder_is_dead(holder: str) -> bool:
    """Whether a lease holder ("host:pid:nonce") was a process on this host that no longer exists."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    return host == socket.gethostname() and pid_text.isdigit() and not psutil.pid_exists(int(pid_text))


class AgentPortTaken(OSError):
    """The agent API's port set by SPOTRUN_CONTROLLER_PORT cannot be bound."""


def _bind_agent_socket(store: Store) -> socket.socket:
    """Bind the port the last controller used, so agents that outlived it find this one; else any free port."""
    with store.session() as session:
        row = session.get(Setting, PORT_SETTING)
        wanted = int(row.value) if row else 0
    configured = from_env("SPOTRUN_CONTROLLER_PORT", AgentPort)
    wanted = configured or wanted
    host = bind_address()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        _bind_within(sock, (host, wanted), PORT_WAIT_SECONDS if configured else 0.0)
    except OSError as error:
        if configured:  # SPOTRUN_CONTROLLER_URL names this port: another one would leave every agent unheard
            sock.close()
            raise AgentPortTaken(
                f"cannot serve the agent API on {host}:{wanted} (SPOTRUN_CONTROLLER_PORT): {error.strerror or error}; "
                "agents report to that port, so no other will do"
            ) from error
        sock.bind((host, 0))
    port = sock.getsockname()[1]
    with store.session() as session:
        session.merge(Setting(key=PORT_SETTING, value=port))
    return sock


def _bind_within(sock: socket.socket, address: tuple[str, int], seconds: float) -> None:
    """Bind, trying again for `seconds` while the port is taken: a controller that just gave the lease up (the one
    this replaces) still holds its port until its process is gone."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            sock.bind(address)
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def advertised_url(port: int) -> str:
    """The agent API's URL as instances must use it: $SPOTRUN_CONTROLLER_URL as given (a routable address for
    cloud instances; bind with SPOTRUN_CONTROLLER_BIND and SPOTRUN_CONTROLLER_PORT to match), else loopback."""
    configured = os.environ.get("SPOTRUN_CONTROLLER_URL")
    return configured.rstrip("/") if configured else f"http://127.0.0.1:{port}"


def live_controller_url(store: Store) -> str | None:
    """The agents' API of the embedded daemon holding the lease, if it lives."""
    with store.session() as session:
        current = lease.read(session, LEASE_NAME)
        if current is None or current.expires_at < database_now(session) or not current.url:
            return None
        if current.holder and holder_is_dead(current.holder):
            return None
        return current.url


def live_worker_url(store: Store) -> str | None:
    """The agents' API of some live controller worker: the lease's daemon, or any worker announced (a team server's,
    `state.workers`) whose process is not known to be gone."""
    url = live_controller_url(store)
    if url:
        return url
    with store.session() as session:
        announced = workers.live(session, database_now(session))
    return next((url for worker, url in announced if not holder_is_dead(worker)), None)


class ControllerDidNotStart(RuntimeError):
    """A controller `ensure_running` started did not take the lease in time; the message names its log."""


def ensure_running(store: Store, *, any_worker: bool = False) -> str:
    """The URL of the live controller, starting one in the background when there is none (InvalidSetting, at once,
    for a setting that one would refuse at its start; ControllerDidNotStart when it did not come up). With
    `any_worker`, any live controller worker will do (what a cancel needs: whichever claims the job acts on it); else
    only the lease's daemon (a launch starts one beside any server: docs/server.md)."""
    url = live_worker_url(store) if any_worker else live_controller_url(store)
    if url:
        return url
    check_environment()
    log_path = config.home() / "controller.log"
    with open(log_path, "ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "spotrun.server.daemon"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "SPOTRUN_DATABASE_URL": store.url},
        )
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline:
        url = live_controller_url(store)
        if url:
            return url
        time.sleep(0.1)
    raise ControllerDidNotStart(f"the controller did not start within {START_TIMEOUT:g} s; see {log_path}")


def _seconds(at_least: float, at_most: float = math.inf) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds from ``at_least`` to ``at_most`` (argparse names the option)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not (math.isfinite(value) and at_least <= value <= at_most):
            bounds = f"of at least {at_least:g}" + (f" and at most {at_most:g}" if math.isfinite(at_most) else "")
            raise argparse.ArgumentTypeError(f"must be a number of seconds {bounds}, got {text}")
        return value

    return parse


TICK_SECONDS = _seconds(at_least=config.MIN_TICK_SECONDS, at_most=config.MAX_TICK_SECONDS)
IDLE_SECONDS = _seconds(at_least=0.0)


def _option_or_env(given: float | None, name: str, default: str, parse: Callable[[str], float]) -> float:
    """The option's value, else environment variable `name`'s (or `default`) as `parse` reads it (InvalidSetting)."""
    if given is not None:
        return given
    text = os.environ.get(name) or default
    try:
        return parse(text)
    except argparse.ArgumentTypeError as problem:
        raise InvalidSetting(f"{name}={text!r} is refused: {problem}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spotrun-controller", description=__doc__)
    parser.add_argument("--tick-interval", type=TICK_SECONDS, help="default: $SPOTRUN_TICK_INTERVAL, else 0.5")
    parser.add_argument(
        "--idle-exit", type=IDLE_SECONDS,
        help="exit after this many seconds without live jobs (0: never; default: $SPOTRUN_IDLE_EXIT, else 120)",
    )
    args = parser.parse_args(argv)
    try:
        tick_interval, idle_exit = check_environment(tick_interval=args.tick_interval, idle_exit=args.idle_exit)
    except InvalidSetting as invalid:
        print(f"{parser.prog}: {invalid}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    daemon = Daemon(Store(), tick_interval=tick_interval, idle_exit=idle_exit)
    signal.signal(signal.SIGTERM, daemon.stop)
    signal.signal(signal.SIGINT, daemon.stop)
    return daemon.run()


if __name__ == "__main__":
    sys.exit(main())
