"""Drive the real `spotrun` CLI, controller daemon, local cloud and agent from tests, and clean up after them."""

from __future__ import annotations

import json
import os
import select as fd_select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from sqlalchemy import select

from spotrun.cli.embedded import EmbeddedBackend
from spotrun.providers.local import LocalProvider, ManualMarket
from spotrun.server.logstream import job_log_stream
from spotrun.state import Store, lease
from vm_emulation.ddp import DDP, uninterrupted_ddp

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"

FAST_CONTROLLER = {
    "SPOTRUN_TICK_INTERVAL": "0.2",
    "SPOTRUN_HEARTBEAT_TIMEOUT": "20",
    "SPOTRUN_BACKOFF_BASE": "1",
    "SPOTRUN_IDLE_EXIT": "20",
}


class Spotrun:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "SPOTRUN_HOME": str(home), **FAST_CONTROLLER}
        self.env.pop("SPOTRUN_DATABASE_URL", None)
        self.cloud = LocalProvider(home / "local-cloud", market=ManualMarket(notice_seconds=3.0))
        self._reads: Store | None = None

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "spotrun.cli.main", *args],
            env=self.env, capture_output=True, text=True, timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"spotrun {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def status(self, job_id: int) -> dict:
        """The job's row as `spotrun status ID --json` prints it, read in this process. Polled through the CLI, each
        read started a Python process (~1.5 s of CPU), most of a core taken from the trainers on a 2-core machine."""
        return json.loads(json.dumps(EmbeddedBackend(self.reads()).detail(job_id).job.to_json()))

    def logs(self, job_id: int) -> str:
        """The job's logs as `spotrun logs ID` prints them (the same stream), read in this process: for polls, where
        a CLI process each time would take most of a core from the trainers."""
        return "".join(job_log_stream(self.reads(), job_id, follow=False))

    def cli_status(self, job_id: int) -> dict:
        """The job's row from the real `spotrun status ID --json`."""
        return json.loads(self.run("status", str(job_id), "--json").stdout)[0]

    def wait_for(self, job_id: int, predicate, timeout: float = 90, what: str = "condition") -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            row = self.status(job_id)
            if predicate(row):
                return row
            time.sleep(0.3)
        raise AssertionError(f"job {job_id}: timed out waiting for {what}; last status {row}\n{self.controller_log()}")

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.home / 'state.db'}"

    def store(self) -> Store:
        return Store(self.database_url)

    def reads(self) -> Store:
        """One store kept for the polls (the CLI created and migrated the database; `shutdown` closes it)."""
        if self._reads is None:
            self._reads = Store(self.database_url, migrate=False)
        return self._reads

    def rows(self, model, order, job_id: int = 1) -> list:
        """The job's rows of `model` (Attempt, Generation, ...), detached from their session."""
        with self.reads().session() as session:
            found = list(session.scalars(select(model).where(model.job_id == job_id).order_by(order)))
            session.expunge_all()
            return found

    def controller_pid(self) -> int | None:
        if not (self.home / "state.db").exists():  # nothing launched yet: no controller, no schema to read
            return None
        with self.reads().session() as session:
            current = lease.read(session, "controller")
            if current is None or current.expires_at < time.time() or not psutil.pid_exists(current.pid or -1):
                return None
            return current.pid

    def start_controller(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "spotrun.server.daemon"], env=self.env, start_new_session=True,
            stdout=open(self.home / "controller.log", "ab"), stderr=subprocess.STDOUT,
        )

    def kill_controller(self) -> int:
        pid = self.controller_pid()
        assert pid is not None, "no live controller to kill"
        try:
            process = psutil.Process(pid)
            process.kill()
            process.wait(10)
        except psutil.NoSuchProcess:
            pass
        return pid

    def controller_log(self) -> str:
        path = self.home / "controller.log"
        return path.read_text()[-4000:] if path.exists() else ""

    def instance_processes(self) -> list[psutil.Process]:
        """Live processes that belong to an instance of this local cloud (marked by the VM's environment)."""
        ids = {i.instance_id for i in self.cloud.list_instances()}
        found = []
        for process in psutil.process_iter():
            try:
                if process.environ().get("SPOTRUN_INSTANCE_ID") in ids:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def shutdown(self) -> None:
        pid = self.controller_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for instance in self.cloud.list_instances():
            if instance.state != "terminated":
                self.cloud.terminate(instance.instance_id)
        if self._reads is not None:
            self._reads.dispose()


class TeamServer:
    def __init__(self, spotrun: Spotrun) -> None:
        self.output = spotrun.home / "server.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spotrun.cli.main", "server", "--port", "0", "--tick-interval", "0.2"],
            env={**spotrun.env, "SPOTRUN_SERVER_LOCAL_CLOUD": "all"},  # its jobs run on the local cloud: allow them
            stdout=subprocess.PIPE, stderr=open(self.output, "ab"), text=True, start_new_session=True,
        )
        try:
            self.url = self._announced_url(timeout=30)
        except BaseException:  # not left running by a test that never gets a server to stop
            self.stop()
            raise

    def _announced_url(self, timeout: float) -> str:
        ready, _, _ = fd_select.select([self.process.stdout], [], [], timeout)
        assert ready, f"the server did not start within {timeout} s:\n{self.output.read_text()}"
        line = self.process.stdout.readline()
        assert line.startswith("spotrun server listening on "), line + self.output.read_text()
        return line.split()[-1]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def digits_job(tmp_path: Path, *, epochs: int = 6, step_seconds: float = 0.05, extra: str = "") -> Path:
    job = tmp_path / "digits.yaml"
    job.write_text(
        f"""
name: digits-e2e
workdir: {DIGITS}
run: python train.py
env: {{EPOCHS: {epochs}, STEP_SECONDS: {step_seconds}, CHECKPOINT_EVERY: 5}}
resources: {{cloud: local, instance_type: local.cpu}}
spot: {{preemptions_before_fallback: 5}}
checkpoint: {{sync_interval: 2s}}
{extra}
"""
    )
    return job


def reference_digits(tmp_path: Path, *, epochs: int = 6) -> dict:
    checkpoints = tmp_path / "reference"
    subprocess.run(
        [sys.executable, "train.py"], cwd=DIGITS, check=True, capture_output=True,
        env={**os.environ, "EPOCHS": str(epochs), "STEP_SECONDS": "0", "CHECKPOINT_EVERY": "5",
             "SPOTRUN_CHECKPOINT_DIR": str(checkpoints)},
    )
    return json.loads((checkpoints / "final.json").read_text())


def final_result(home: Path, job_id: int, name: str = "digits-e2e") -> dict:
    return json.loads((home / "checkpoints" / f"{job_id}-{name}" / "final.json").read_text())


def ddp_job(
    tmp_path: Path, *, nodes: int = 3, epochs: int = 10, step_seconds: float = 0.15, extra: str = "", parallel: str = "ddp"
) -> Path:
    job = tmp_path / "ddp.yaml"
    job.write_text(
        f"""
name: ddp-e2e
workdir: {DDP}
run: python train.py
env: {{EPOCHS: {epochs}, STEP_SECONDS: {step_seconds}, CHECKPOINT_EVERY: 5, COLLECTIVE_TIMEOUT: 30, PARALLEL: {parallel}}}
resources: {{cloud: local, instance_type: local.cpu, nodes: {nodes}}}
spot: {{preemptions_before_fallback: 5}}
checkpoint: {{sync_interval: 1s}}
{extra}
"""
    )
    return job


_reference_ddp_results: dict[tuple[int, int, str], dict] = {}


def reference_ddp(tmp_path: Path, *, nodes: int = 3, epochs: int = 10, parallel: str = "ddp") -> dict:
    """The same DDP (or FSDP) training, never interrupted: `nodes` processes on 127.0.0.1, no spotrun platform. Run
    once per (nodes, epochs, parallel) in a test session: the training is deterministic, and each run costs ~15 s on
    2 cores."""
    if (nodes, epochs, parallel) not in _reference_ddp_results:
        _reference_ddp_results[nodes, epochs, parallel] = _run_reference_ddp(tmp_path, nodes, epochs, parallel)
    return _reference_ddp_results[nodes, epochs, parallel]


def _run_reference_ddp(tmp_path: Path, nodes: int, epochs: int, parallel: str) -> dict:
    env = {"EPOCHS": str(epochs), "CHECKPOINT_EVERY": "5", "PARALLEL": parallel}
    return uninterrupted_ddp(tmp_path / "reference-ddp", nodes, env)


def final_ddp_result(home: Path, job_id: int) -> dict:
    return final_result(home, job_id, "ddp-e2e")
