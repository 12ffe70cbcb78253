"""The control plane in the test's process: the real agent API served by uvicorn on 127.0.0.1 (free port), and a
real `Controller` ticking on the wall clock in a thread, with the providers the test hands it.

`paused()` holds the ticks (a tick in progress finishes first) while the agent API keeps answering: the controller
then looks only after what happened meanwhile, e.g. after the cloud already reclaimed an instance.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from spotrun.control.controller import Controller, ControllerSettings
from spotrun.control.heard import HeardAgents
from spotrun.providers import Provider
from spotrun.server.agent_api import create_agent_app
from spotrun.state import Store

log = logging.getLogger(__name__)


class ControlPlane:
    def __init__(
        self,
        store: Store,
        provider_factory: Callable[[str], Provider],
        *,
        prices: Callable[..., tuple[float, float]] | None = None,
        tick_interval: float = 0.2,
        **settings: float,
    ) -> None:
        self.store = store
        self.tick_interval = tick_interval
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        heard = HeardAgents(time.time)  # the agent API's and the controller's, as in a daemon
        self._api = uvicorn.Server(uvicorn.Config(create_agent_app(store, heard=heard), log_level="warning",
                                                  access_log=False))
        options = {"prices": prices} if prices is not None else {}
        self.controller = Controller(
            store, ControllerSettings(controller_url=self.url, **settings), provider_factory=provider_factory,
            heard=heard, **options
        )
        self.tick_errors: list[BaseException] = []
        self._stop = threading.Event()
        self._ticking = threading.Lock()  # held during a tick, and while paused
        self._api_thread = threading.Thread(target=self._api.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._tick_thread = threading.Thread(target=self._loop, name="controller-ticks", daemon=True)

    def __enter__(self) -> ControlPlane:
        self._api_thread.start()
        deadline = time.monotonic() + 10
        while not self._api.started:
            if time.monotonic() > deadline or not self._api_thread.is_alive():
                raise RuntimeError(f"the agent API did not start on {self.url}")
            time.sleep(0.02)
        self._tick_thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._tick_thread.join(timeout=30)
        self._api.should_exit = True
        self._api_thread.join(timeout=10)
        self._socket.close()

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._ticking:
            yield

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._ticking:
                try:
                    self.controller.tick()
                except BaseException as error:  # tick() itself catches per-job errors; anything else is a bug
                    log.exception("controller tick failed")
                    self.tick_errors.append(error)
            self._stop.wait(self.tick_interval)
