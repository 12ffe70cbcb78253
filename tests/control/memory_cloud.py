"""An in-memory cloud for controller tests: honours the Provider contract (idempotent tokens, capacity, reclaim)."""

from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import replace

from spotrun.providers import InstanceInfo, LaunchRequest, NoCapacity


class Crash(BaseException):
    """Stands for the controller process dying at this exact point (not an Exception: nothing catches it)."""


def _locked(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


# Its zones, unless a test names others: a job placed in it names them, not the local cloud's (`jobs.submit`'s
# `local_zones`)
ZONES = ("m-a", "m-b", "m-c")


class MemoryCloud:
    name = "memory"

    def __init__(self, clock, zones=ZONES):
        self.clock = clock
        self._zones = list(zones)
        self.capacity = {z: True for z in zones}
        self.instances: dict[str, InstanceInfo] = {}
        self.user_data: dict[str, dict] = {}
        self.launch_calls = 0
        self.requests: list[LaunchRequest] = []  # every launch asked for, in order
        self.crash_after_launch = False
        self.crash_after_terminate = False
        self.forgotten: set[str] = set()
        self._ids = itertools.count(1)
        self._lock = threading.RLock()  # several controller workers may call at once

    def zones(self, instance_type, accelerators=None):
        return list(self._zones)

    @_locked
    def launch(self, request: LaunchRequest) -> InstanceInfo:
        self.launch_calls += 1
        self.requests.append(request)
        existing = self.find_by_token(request.client_token)
        if existing is not None:
            return existing
        if request.market == "spot" and not self.capacity[request.zone]:
            raise NoCapacity(f"no spot capacity in {request.zone}")
        info = InstanceInfo(
            instance_id=f"mi-{next(self._ids)}", zone=request.zone, market=request.market,
            instance_type=request.instance_type, state="running", launched_at=self.clock.now(),
            client_token=request.client_token,
        )
        self.instances[info.instance_id] = info
        self.user_data[info.instance_id] = request.user_data
        if self.crash_after_launch:
            self.crash_after_launch = False
            raise Crash()
        return info

    @_locked
    def find_by_token(self, client_token):
        return next((i for i in self.instances.values() if i.client_token == client_token), None)

    def describe(self, instance_id):
        if instance_id in self.forgotten:  # as EC2 answers an hour after an instance went: not listed
            return InstanceInfo(instance_id=instance_id, zone="", market="spot", instance_type="", state="unknown",
                                detail={"why": "not listed"})
        return self.instances[instance_id]

    @_locked
    def forget(self, instance_id):
        """The instance went (taken back) and the cloud no longer lists it."""
        self.reclaim(instance_id)
        self.forgotten.add(instance_id)

    @_locked
    def terminate(self, instance_id):
        if instance_id in self.forgotten:
            return  # EC2: an instance it no longer knows is fine
        info = self.instances[instance_id]
        if info.state != "terminated":
            self.instances[instance_id] = replace(info, state="terminated", terminated_at=self.clock.now())
        if self.crash_after_terminate:
            self.crash_after_terminate = False
            raise Crash()

    @_locked
    def reclaim(self, instance_id):
        info = self.instances[instance_id]
        self.instances[instance_id] = replace(info, state="terminated", reclaimed=True, terminated_at=self.clock.now())

    @_locked
    def list_instances(self):
        return [info for instance_id, info in self.instances.items() if instance_id not in self.forgotten]

    def preempt(self, instance_id, notice_seconds=None):
        self.reclaim(instance_id)

    def running(self):
        return [i for i in self.instances.values() if i.state == "running"]
