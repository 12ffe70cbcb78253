"""The embedded backend: the store on this machine (SQLite by default), a controller daemon started on demand."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from spotrun.api_models import EventView, JobCost, JobDetail, JobRow, Launched, PreemptAccepted
from spotrun.cli.backend import BackendError, Interrupted
from spotrun.control import jobs as jobs_api
from spotrun.server.logstream import job_log_stream
from spotrun.server.views import event_views, job_cost, job_detail, job_row
from spotrun.spec import SpecError, load_job_file, located
from spotrun.state import Store


class EmbeddedBackend:
    def __init__(self, store: Store | None = None) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store()
        return self._store

    def launch(self, job_file: Path) -> Launched:
        from spotrun.server.daemon import check_environment

        check_environment()  # before the job is stored: the controller started for it would refuse the same
        spec, text = load_job_file(job_file)
        try:
            job_id = jobs_api.submit(
                self.store, spec, time.time(), spec_dir=job_file.resolve().parent, source=str(job_file))
        except SpecError as error:
            raise located(error, text) from None
        self._ensure_controller(f"job {job_id} is stored, but ", job_id)
        return Launched(id=job_id, name=spec.name or "job", owner=jobs_api.LOCAL_OWNER)

    def caller(self) -> str:
        return jobs_api.LOCAL_OWNER

    def rows(self, job_id: int | None = None, *, ended: bool | None = None, limit: int | None = None) -> list[JobRow]:
        now = time.time()
        with self.store.session() as session:
            if job_id is not None:
                found = [jobs_api.get_job(session, job_id)]
            else:
                found = jobs_api.list_jobs(session, ended=ended, limit=limit)
            return [job_row(job, now) for job in found]

    def detail(self, job_id: int) -> JobDetail:
        with self.store.session() as session:
            return job_detail(session, jobs_api.get_job(session, job_id), time.time())

    def events(self, job_id: int, after: int) -> list[EventView]:
        with self.store.session() as session:
            jobs_api.get_job(session, job_id)
            return event_views(jobs_api.job_events(session, job_id, after_id=after))

    def log_stream(self, job_id: int, *, follow: bool) -> Iterator[str]:
        return job_log_stream(self.store, job_id, follow=follow)

    def cancel(self, job_id: int) -> bool:
        if not jobs_api.request_cancel(self.store, job_id, time.time()):
            return False
        # a team server's worker on this store acts on it as well: no daemon of our own to claim the server's jobs
        self._ensure_controller(f"the cancel of job {job_id} is stored, but ", job_id, any_worker=True)
        return True

    def _ensure_controller(self, done: str, job_id: int, *, any_worker: bool = False) -> None:
        """A controller running for what `done` says was stored (BackendError, naming its log, when none starts;
        Interrupted on Ctrl-C while it starts, which it goes on doing: it runs in a session of its own)."""
        from spotrun.server.daemon import ControllerDidNotStart, ensure_running

        try:
            ensure_running(self.store, any_worker=any_worker)
        except ControllerDidNotStart as error:
            raise BackendError(f"{done}{error}") from None
        except KeyboardInterrupt:
            raise Interrupted(f"{done}the wait for its controller was interrupted: `spotrun status {job_id}` shows "
                              f"the job, `spotrun cancel {job_id}` stops it") from None

    def preempt(self, job_id: int, notice_seconds: float | None, node: int | None = None) -> PreemptAccepted:
        target = jobs_api.preempt(self.store, job_id, time.time(), notice_seconds, node)
        return PreemptAccepted(job_id=job_id, instance_id=target.instance_id, attempt_number=target.attempt_number)

    def cost(self, job_id: int) -> JobCost:
        with self.store.session() as session:
            return job_cost(session, jobs_api.get_job(session, job_id), time.time())
