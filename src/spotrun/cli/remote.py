"""The remote backend: a team server's /api/v1 over HTTP, authenticated with the user's API token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from spotrun.api_models import (
    CALLER_HEADER, MAX_SOURCE_CHARS, STREAM_REVOKED, CancelAccepted, EventView, InvalidSpec, JobCost, JobDetail, JobRow,
    Launched, PreemptAccepted,
)
from spotrun.cli.backend import SERVER_ENV, TOKEN_ENV, BackendError
from spotrun.config import InvalidSetting
from spotrun.control.job_errors import JobNotFound

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
API_PATH = "/api/v1"
BASE_URL_HINT = f"{SERVER_ENV} is the server's base URL, as `spotrun server` prints it, without {API_PATH}"


def api_client(server: str, token: str, client: httpx.Client | None = None) -> tuple[str, httpx.Client]:
    """The server's base URL (`checked_server_url`) and a client of its API sending `token`; `client` is used instead
    of a new one where given (tests: the app's TestClient)."""
    base = checked_server_url(server)
    client = client if client is not None else httpx.Client(timeout=TIMEOUT)
    client.base_url = f"{base}{API_PATH}"
    client.headers["Authorization"] = f"Bearer {token}"
    return base, client


def checked_server_url(server: str) -> str:
    """`server` ($SPOTRUN_SERVER) without its trailing slash; InvalidSetting, naming the variable and what is wrong,
    for one that is no http(s) URL of a server or names its API's path."""
    try:
        url = httpx.URL(server)
    except httpx.InvalidURL as problem:  # a bad port or a control character, as typed
        raise InvalidSetting(f"{SERVER_ENV} is not a URL ({server!r}): {problem}") from None
    if "://" not in server:  # `host:port`, read as a scheme and a path
        raise InvalidSetting(f"{SERVER_ENV}={server!r} is refused: it must start with http:// or https:// "
                             f"(http://{server}?); {BASE_URL_HINT}")
    if url.scheme not in ("http", "https") or not url.host:
        raise InvalidSetting(f"{SERVER_ENV}={server!r} is refused: it must be an http:// or https:// URL with a host; "
                             f"{BASE_URL_HINT}")
    base = server.rstrip("/")
    if url.path.rstrip("/").endswith(API_PATH):
        raise InvalidSetting(f"{SERVER_ENV}={server!r} is refused: {BASE_URL_HINT} "
                             f"({base.removesuffix(API_PATH)})")
    return base


class RemoteBackend:
    def __init__(self, server: str, token: str, *, client: httpx.Client | None = None) -> None:
        """`client` sends the requests instead of a client of its own (tests: the app's TestClient)."""
        self.server, self._client = api_client(server, token, client)
        self._caller: str | None = None

    def caller(self) -> str | None:
        return self._caller

    def launch(self, job_file: Path) -> Launched:
        from spotrun.spec import Problem, SpecError, load_job_file  # the job file's models: only a launch reads one

        _, text = load_job_file(job_file)  # the file's errors as embedded mode says them, before anything is sent
        source = str(job_file) if len(str(job_file)) <= MAX_SOURCE_CHARS else job_file.name  # what the server takes
        body = {"spec": text, "source": source,
                "base_dir": str(job_file.resolve().parent)}
        response = self._send("POST", "/jobs", json=body)
        if response.status_code == 422 and (invalid := _invalid_spec(response)) is not None:
            raise SpecError(invalid.source, [Problem(p.field, p.message, p.line) for p in invalid.problems],
                            heading=invalid.detail)  # the server's: its settings' refusal is no invalid file
        return Launched.model_validate(self._ok(response).json())  # another 422 (the request's shape): its detail

    def rows(self, job_id: int | None = None, *, ended: bool | None = None, limit: int | None = None) -> list[JobRow]:
        if job_id is not None:
            return [self.detail(job_id).job]
        selection = {name: value for name, value in (("ended", ended), ("limit", limit)) if value is not None}
        return [JobRow.model_validate(row) for row in self._ok(self._send("GET", "/jobs", params=selection)).json()]

    def detail(self, job_id: int) -> JobDetail:
        return JobDetail.model_validate(self._job_json("GET", job_id, ""))

    def events(self, job_id: int, after: int) -> list[EventView]:
        return [EventView.model_validate(e) for e in self._job_json("GET", job_id, "/events", params={"after": after})]

    def log_stream(self, job_id: int, *, follow: bool) -> Iterator[str]:
        request = self._client.build_request(
            "GET", f"/jobs/{job_id}/logs", params={"follow": follow}, timeout=httpx.Timeout(30.0, read=None),
        )
        try:
            response = self._client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        try:
            if response.status_code in (404, 422):
                response.read()
            if _no_such_job(response):
                raise JobNotFound(job_id)
            self._ok(response)
            tail = ""
            for text in response.iter_text():
                yield text
                tail = (tail + text)[-len(STREAM_REVOKED):]
            if follow and tail == STREAM_REVOKED:
                raise BackendError(f"the server at {self.server} ended the log stream: the token in {TOKEN_ENV} was "
                                   "revoked")
        finally:
            response.close()

    def cancel(self, job_id: int) -> bool:
        response = self._send("POST", f"/jobs/{job_id}/cancel")
        if response.status_code == 409:
            return False
        return CancelAccepted.model_validate(self._for_job(response, job_id).json()).cancel_requested

    def preempt(self, job_id: int, notice_seconds: float | None, node: int | None = None) -> PreemptAccepted:
        response = self._send("POST", f"/jobs/{job_id}/preempt", json={"notice_seconds": notice_seconds, "node": node})
        if response.status_code == 409:
            raise LookupError(_detail(response))
        return PreemptAccepted.model_validate(self._for_job(response, job_id).json())

    def cost(self, job_id: int) -> JobCost:
        return JobCost.model_validate(self._job_json("GET", job_id, "/cost"))

    def _job_json(self, method: str, job_id: int, path: str, **options: Any) -> Any:
        return self._for_job(self._send(method, f"/jobs/{job_id}{path}", **options), job_id).json()

    def _send(self, method: str, path: str, **options: Any) -> httpx.Response:
        try:
            response = self._client.request(method, path, **options)
        except httpx.HTTPError as error:
            raise self._unreachable(error) from None
        self._caller = response.headers.get(CALLER_HEADER, self._caller)
        return response

    def _for_job(self, response: httpx.Response, job_id: int) -> httpx.Response:
        if _no_such_job(response):
            raise JobNotFound(job_id)
        return self._ok(response)

    def _ok(self, response: httpx.Response) -> httpx.Response:
        if response.status_code == 401:
            raise BackendError(f"the server at {self.server} refused the token in {TOKEN_ENV} (unknown or revoked)")
        if response.is_error:
            response.read()
            hint = f" ({BASE_URL_HINT})" if _no_route(response) else ""
            raise BackendError(
                f"the server at {self.server} answered {response.status_code}: {_detail(response)}{hint}")
        return response

    def _unreachable(self, error: httpx.HTTPError) -> BackendError:
        return BackendError(f"cannot reach the spotrun server at {self.server}: {error}")


def _invalid_spec(response: httpx.Response) -> InvalidSpec | None:
    """The job file's problems, when the 422 is about them (not about the request's own fields)."""
    try:
        return InvalidSpec.model_validate(response.json())
    except ValueError:  # not JSON, or FastAPI's 422 of a request it could not read
        return None


def _no_such_job(response: httpx.Response) -> bool:
    """404, or the server's 422 for a job id no job can have (0, -1, past 32 bits): what embedded mode says of
    both is "no job with id N"."""
    if response.status_code == 404:
        return not _no_route(response)
    if response.status_code != 422:
        return False
    try:
        problems = response.json().get("detail")
    except ValueError:
        return False
    return isinstance(problems, list) and any(
        isinstance(problem, dict) and problem.get("loc") == ["path", "job_id"] for problem in problems
    )


def _no_route(response: httpx.Response) -> bool:
    """A 404 for the path itself, not for a job: FastAPI's answer to a route it does not have (a SPOTRUN_SERVER with
    a path too many, or too few under a proxy), or a page that is not the API's JSON (a proxy's, another server's)."""
    if response.status_code != 404:
        return False
    try:
        body = response.json()
    except ValueError:
        return True
    return not isinstance(body, dict) or body.get("detail") == "Not Found"


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)
