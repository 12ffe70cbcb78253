"""Container runners: the fake kubelet's container runtime. The cluster calls them under its lock, keyed by pod uid.

`IdleRunner` (the default) runs nothing: its containers run until a test makes them exit or the pod is killed.
`ProcessRunner` runs each container's `command + args` as a local process, in a session of its own, with the env
the pod spec gives it; every process of the pod carries a marker in its environment, so a pod is killed whole, even
grandchildren that started their own session (as tests/vm_emulation does for a VM).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from .selectors import Obj, lookup

POD_MARKER_ENV = "SPOTRUN_FAKE_K8S_POD"
SecretLookup = Callable[[str, str], "Obj | None"]  # (namespace, name) -> the Secret's JSON


class Runner(Protocol):
    """What the fake kubelet needs of a container runtime. `start` may raise ContainerConfigError; `exited` gives
    the exit codes of the pod's containers that have exited; `terminate` is SIGTERM, `kill` SIGKILL (no waiting)."""

    def start(self, pod: Obj, secret: SecretLookup) -> None: ...
    def exited(self, uid: str) -> dict[str, int]: ...
    def terminate(self, uid: str) -> None: ...
    def kill(self, uid: str) -> None: ...
    def log_of(self, namespace: str, name: str, container: str | None = None) -> str: ...
    def close(self) -> None: ...


class ContainerConfigError(Exception):
    """The container cannot be started as specified (a missing secret or key): CreateContainerConfigError."""


def container_env(pod: Obj, container: Obj, secret: SecretLookup) -> dict[str, str]:
    """The env a container gets from its `envFrom` secretRefs and `env` (value, fieldRef, secretKeyRef)."""
    namespace, env = pod["metadata"]["namespace"], {}

    def secret_data(ref: Obj) -> dict[str, str] | None:
        found = secret(namespace, ref["name"])
        if found is None and not ref.get("optional"):
            raise ContainerConfigError(f'secret "{ref["name"]}" not found')
        return {k: base64.b64decode(v).decode() for k, v in (found or {}).get("data", {}).items()} if found else None

    for source in container.get("envFrom") or []:
        if "secretRef" in source:
            env.update({source.get("prefix", "") + k: v for k, v in (secret_data(source["secretRef"]) or {}).items()})
    for variable in container.get("env") or []:
        origin = variable.get("valueFrom")
        if origin is None:
            env[variable["name"]] = variable.get("value", "")
        elif "fieldRef" in origin:
            env[variable["name"]] = str(lookup(pod, origin["fieldRef"]["fieldPath"]) or "")
        elif "secretKeyRef" in origin:
            ref = origin["secretKeyRef"]
            data = secret_data(ref)
            if data is not None and ref["key"] not in data and not ref.get("optional"):
                raise ContainerConfigError(f"couldn't find key {ref['key']} in Secret {namespace}/{ref['name']}")
            if data is not None and ref["key"] in data:
                env[variable["name"]] = data[ref["key"]]
        else:
            raise ContainerConfigError(f"the fake does not support valueFrom {sorted(origin)}")
    return env


def signal_exit_code(returncode: int) -> int:
    """A container killed by signal N exits 128+N, as the container runtime reports it."""
    return 128 - returncode if returncode < 0 else returncode


class IdleRunner:
    """Containers that only exist: they exit when the test says (`exit`), on SIGTERM (unless `ignore_sigterm`,
    then only when the grace runs out) or SIGKILL. The env each got is kept, for tests to look at."""

    def __init__(self, ignore_sigterm: bool = False) -> None:
        self.ignore_sigterm = ignore_sigterm
        self.envs: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
        self._running: dict[str, list[str]] = {}
        self._exited: dict[str, dict[str, int]] = {}

    def start(self, pod: Obj, secret: SecretLookup) -> None:
        containers = pod["spec"]["containers"]
        envs = {c["name"]: container_env(pod, c, secret) for c in containers}
        self.envs[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = envs
        self._running[pod["metadata"]["uid"]] = [c["name"] for c in containers]
        self._exited[pod["metadata"]["uid"]] = {}

    def exit(self, uid: str, code: int) -> None:
        for name in self._running.get(uid, []):
            self._exited[uid].setdefault(name, code)

    def exited(self, uid: str) -> dict[str, int]:
        return dict(self._exited.get(uid, {}))

    def terminate(self, uid: str) -> None:
        if not self.ignore_sigterm:
            self.exit(uid, 128 + signal.SIGTERM)

    def kill(self, uid: str) -> None:
        self.exit(uid, 128 + signal.SIGKILL)

    def log_of(self, namespace: str, name: str, container: str | None = None) -> str:
        return ""

    def close(self) -> None:
        for uid in list(self._running):
            self.kill(uid)


class ProcessRunner:
    """Runs containers as local processes in per-pod folders under `root`; emptyDir mount paths named in the
    command, args or env values are mapped to folders of the pod (the way tests/vm_emulation maps a VM's disk)."""

    def __init__(self, root: Path, base_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.base_env = dict(base_env if base_env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        self._processes: dict[str, dict[str, subprocess.Popen[bytes]]] = {}
        self._markers: dict[str, str] = {}
        self._logs: dict[tuple[str, str], dict[str, Path]] = {}  # (namespace, name) -> container -> log
        self._uids: dict[tuple[str, str], str] = {}
        self._unstartable: dict[str, dict[str, int]] = {}  # uid -> container -> 128: its command could not start

    def folder_of(self, namespace: str, name: str) -> Path:
        """The folder of the newest pod of that name: its emptyDir volumes under volumes/, logs as CONTAINER.log."""
        return next(iter(self._logs[(namespace, name)].values())).parent

    def start(self, pod: Obj, secret: SecretLookup) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        folder = self.root / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        envs = {c["name"]: container_env(pod, c, secret) for c in spec["containers"]}  # fail before starting any
        if any(not c.get("command") for c in spec["containers"]):
            raise ContainerConfigError("the fake runs no image entrypoints: every container needs a command")
        mounts = {v["name"]: folder / "volumes" / v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
        marker = self._markers[meta["uid"]] = uuid.uuid4().hex
        logs = self._logs[(meta["namespace"], meta["name"])] = {}
        self._uids[(meta["namespace"], meta["name"])] = meta["uid"]
        self._processes[meta["uid"]] = {}
        folder.mkdir(parents=True, exist_ok=True)
        for container in spec["containers"]:
            paths = {m["mountPath"]: str(mounts[m["name"]]) for m in container.get("volumeMounts") or []
                     if m["name"] in mounts}

            def mapped(text: str) -> str:
                for mount_path in sorted(paths, key=len, reverse=True):
                    text = text.replace(mount_path, paths[mount_path])
                return text

            for path in paths.values():
                Path(path).mkdir(parents=True, exist_ok=True)
            env = {"HOME": str(folder), "HOSTNAME": meta["name"], **self.base_env,
                   **{k: mapped(v) for k, v in envs[container["name"]].items()}, POD_MARKER_ENV: marker}
            logs[container["name"]] = folder / f"{container['name']}.log"
            with open(logs[container["name"]], "ab") as log:
                try:
                    self._processes[meta["uid"]][container["name"]] = subprocess.Popen(
                        [mapped(part) for part in [*container["command"], *(container.get("args") or [])]],
                        env=env, cwd=folder, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                except OSError as error:  # as a runtime's StartError: the container ends at once with 128
                    log.write(f"failed to start: {error}\n".encode())
                    self._unstartable.setdefault(meta["uid"], {})[container["name"]] = 128

    def exited(self, uid: str) -> dict[str, int]:
        done = {name: p.poll() for name, p in self._processes.get(uid, {}).items()}
        codes = {name: signal_exit_code(code) for name, code in done.items() if code is not None}
        return {**codes, **self._unstartable.get(uid, {})}

    def _signal_groups(self, uid: str, signum: int) -> None:
        for process in self._processes.get(uid, {}).values():
            try:
                os.killpg(process.pid, signum)  # its own session: the group id is its pid
            except (ProcessLookupError, PermissionError):
                pass

    def terminate(self, uid: str) -> None:
        self._signal_groups(uid, signal.SIGTERM)

    def processes(self, namespace: str, name: str) -> list[psutil.Process]:
        """Every live process carrying the marker of the newest pod of that name."""
        return self._marked(self._uids.get((namespace, name), ""))

    def _marked(self, uid: str) -> list[psutil.Process]:
        found, marker = [], self._markers.get(uid)
        for process in psutil.process_iter() if marker else []:
            try:
                if process.environ().get(POD_MARKER_ENV) == marker and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def kill(self, uid: str) -> None:
        """SIGKILL to the containers' groups and to every process carrying the pod's marker. Does not wait."""
        self._signal_groups(uid, signal.SIGKILL)
        for process in self._marked(uid):
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass

    def log_of(self, namespace: str, name: str, container: str | None = None) -> str:
        logs = self._logs.get((namespace, name), {})
        path = logs.get(container) if container else next(iter(logs.values()), None)
        return path.read_text(errors="replace") if path and path.exists() else ""

    def close(self) -> None:
        for uid in list(self._processes):
            self.kill(uid)
        for process in (p for group in self._processes.values() for p in group.values()):
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

