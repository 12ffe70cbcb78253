"""Preemption notice sources that read a cloud's instance metadata service: AWS IMDSv2, the GCE metadata
server and Azure Scheduled Events.

Every source follows the rule of `spotrun.agent.notices`: a probe that fails (no answer, an error status, an
answer that cannot be trusted or parsed) is "unknown" and `poll` returns None, never a notice; `poll` never
raises. Announcements that are not preemptions (an EC2 rebalance recommendation, a GCE live migration, an Azure
reboot or freeze) are `EarlyWarning`s: logged once and handed to an optional callback, never a `Notice`.

The services are link-local, so requests never go through a proxy, and every one has a short timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from spotrun.agent.notices import RECLAIM_ACTIONS, Notice, NoticeSource, parse_iso_time, sooner

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 1.0

CLOUD_ENV_VAR = "SPOTRUN_CLOUD"  # aws | gcp | azure, exported by the provider's startup script
AWS_URL_ENV_VAR = "SPOTRUN_AWS_METADATA_URL"
GCE_URL_ENV_VAR = "SPOTRUN_GCE_METADATA_URL"
AZURE_URL_ENV_VAR = "SPOTRUN_AZURE_METADATA_URL"
AZURE_VM_NAME_ENV_VAR = "SPOTRUN_AZURE_VM_NAME"
AZURE_ACKNOWLEDGE_ENV_VAR = "SPOTRUN_AZURE_ACKNOWLEDGE_PREEMPT"

AWS_METADATA_URL = "http://169.254.169.254"
AWS_TOKEN_PATH = "/latest/api/token"
AWS_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
AWS_TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_TOKEN_TTL_SECONDS = 21600  # the longest IMDSv2 allows
AWS_TOKEN_REFRESH_MARGIN = 0.1  # renew once 90% of the token's life has passed
AWS_REBALANCE_WARNING = "rebalance"

GCE_METADATA_URL = "http://metadata.google.internal"
GCE_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
GCE_MAINTENANCE_PATH = "/computeMetadata/v1/instance/maintenance-event"
GCE_FLAVOR_HEADER = "Metadata-Flavor"
GCE_FLAVOR = "Google"
AWS_SPOT_NOTICE_SECONDS = 120.0  # EC2's interruption notice comes two minutes ahead
AZURE_SPOT_NOTICE_SECONDS = 30.0  # a Spot VM's Preempt event: NotBefore at least 30 s ahead
GCE_PREEMPTION_NOTICE_SECONDS = 30.0  # GCE stops a preempted VM 30 s after `preempted` turns TRUE
GCE_MAINTENANCE_NOTICE_SECONDS = 60.0  # and announces host maintenance 60 s ahead
GCE_LONG_POLL_SECONDS = 60.0
GCE_RETRY_SECONDS = 1.0

AZURE_METADATA_URL = "http://169.254.169.254"
AZURE_EVENTS_PATH = "/metadata/scheduledevents"
AZURE_API_VERSION = "2020-07-01"
AZURE_PREEMPT = "Preempt"

KNOWN_CLOUDS = ("aws", "gcp", "azure")


class ProbeFailed(Exception):
    """The metadata service gave no usable answer: the state is unknown."""


@dataclass(frozen=True)
class EarlyWarning:
    """An announcement that is not a preemption (yet): the supervisor must not stop the trainer for it."""

    source: str
    detail: str
    at: float | None  # unix seconds the cloud gave for it, when it gave one
    kind: str = ""  # what it announces, by the source's name for it: "rebalance" (EC2), "maintenance ...", an event type


EarlyWarningHandler = Callable[[EarlyWarning], None]


def metadata_client(base_url: str, timeout: float | httpx.Timeout) -> httpx.Client:
    # trust_env=False: a metadata service is link-local and must never be reached through $HTTP_PROXY.
    return httpx.Client(base_url=base_url, timeout=timeout, trust_env=False, follow_redirects=False)


class MetadataSource:
    """Common to the cloud sources: `poll` turns any failure into None (logged once per distinct reason),
    keeps the first notice it found, and passes early warnings on once each."""

    name = "metadata"
    notice_seconds: float | None = None  # how long before the reclaim the cloud's notice comes, where it is fixed
    # Probing on after a notice, for a sooner one (GCE: `preempted` after a host maintenance event's 60 s); the
    # others keep their first.
    watches_after_notice = False

    def __init__(self, on_early_warning: EarlyWarningHandler | None) -> None:
        self._on_early_warning = on_early_warning
        self._warned: set[str] = set()
        self._last_unknown: str | None = None
        self._notice: Notice | None = None

    def poll(self) -> Notice | None:
        if self._notice is not None and not self.watches_after_notice:
            return self._notice
        try:
            found = self._probe()
        except (ProbeFailed, httpx.HTTPError) as exc:
            self._unknown(f"{type(exc).__name__}: {exc}")
            return self._notice
        except Exception as exc:  # a bug here must not stop the watcher; the rule is "unknown", not "preempted"
            if repr(exc) != self._last_unknown:
                log.exception("notice source %s failed unexpectedly", self.name)
                self._last_unknown = repr(exc)
            return self._notice
        self._last_unknown = None
        self._notice = sooner(self._notice, found)
        return self._notice

    def _probe(self) -> Notice | None:
        raise NotImplementedError

    def instance_may_go(self) -> None:
        """The agent is done with the instance (the trainer stopped, the final backup and the exit report are
        through): a source may tell its cloud it need not wait for the notice's deadline. Most do nothing."""

    def relay_early_warnings(self, handler: EarlyWarningHandler) -> None:
        """Pass early warnings on to `handler` too (the agent reports them to the controller)."""
        before = self._on_early_warning

        def both(warning: EarlyWarning) -> None:
            if before is not None:
                before(warning)
            handler(warning)

        self._on_early_warning = both

    def _early_warning(self, key: str, detail: str, at: float | None, kind: str | None = None) -> None:
        """Log and pass on the warning `key` (of `kind`, by default the key itself) the first time it is seen."""
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning("early warning from %s (not a preemption): %s", self.name, detail)
        if self._on_early_warning is not None:
            try:
                self._on_early_warning(EarlyWarning(self.name, detail, at, kind or key))
            except Exception:
                log.exception("early-warning handler failed")

    def _unknown(self, why: str) -> None:
        if why != self._last_unknown:
            log.warning("notice probe %s unknown: %s", self.name, why)
            self._last_unknown = why


def json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        document = response.json()
    except ValueError as exc:
        raise ProbeFailed(f"{what} is not JSON: {response.text[:80]!r}") from exc
    if not isinstance(document, dict):
        raise ProbeFailed(f"{what} is not a JSON object: {response.text[:80]!r}")
    return document


class AwsSpotNotice(MetadataSource):
    """EC2 spot interruption through IMDSv2: `spot/instance-action` is 404 until the instance is to be reclaimed,
    then {"action": "terminate"|"stop"|"hibernate", "time": "<ISO-8601>"}. A rebalance recommendation is an
    early warning. The session token is cached, renewed before it expires, and fetched again on a 401."""

    name = "aws-imds"
    notice_seconds = AWS_SPOT_NOTICE_SECONDS

    def __init__(
        self,
        base_url: str = AWS_METADATA_URL,
        *,
        token_ttl: int = AWS_TOKEN_TTL_SECONDS,
        timeout: float = PROBE_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.time,
        on_early_warning: EarlyWarningHandler | None = None,
    ) -> None:
        super().__init__(on_early_warning)
        self._client = metadata_client(base_url, timeout)
        self._token_ttl = token_ttl
        self._clock = clock
        self._token: str | None = None
        self._token_renew_at = 0.0

    def close(self) -> None:
        self._client.close()

    def _probe(self) -> Notice | None:
        notice = self._instance_action()
        if notice is None:
            self._check_rebalance()
        return notice

    def _instance_action(self) -> Notice | None:
        response = self._get(AWS_INSTANCE_ACTION_PATH)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProbeFailed(f"instance-action answered {response.status_code}")
        action = json_object(response, "instance-action")
        kind, when = action.get("action"), action.get("time")
        if kind not in RECLAIM_ACTIONS or not isinstance(when, str):
            raise ProbeFailed(f"unexpected instance-action {action!r}")
        try:
            deadline = parse_iso_time(when)
        except ValueError as exc:
            raise ProbeFailed(f"instance-action time {when!r} is not ISO-8601") from exc
        return Notice(self.name, deadline, f"spot instance-action {kind} at {when}")

    def _check_rebalance(self) -> None:
        """A failed rebalance probe must not hide a good answer about instance-action; the recommendation is
        advisory, so its failures are only logged at debug level (the instance-action probe reports outages)."""
        if AWS_REBALANCE_WARNING in self._warned:
            return
        try:
            response = self._get(AWS_REBALANCE_PATH)
            if response.status_code == 404:
                return
            if response.status_code != 200:
                raise ProbeFailed(f"rebalance recommendation answered {response.status_code}")
            notice_time = json_object(response, "rebalance recommendation").get("noticeTime")
            at = parse_iso_time(notice_time) if isinstance(notice_time, str) else None
        except (ProbeFailed, httpx.HTTPError, ValueError) as exc:
            log.debug("rebalance recommendation unknown: %s: %s", type(exc).__name__, exc)
            return
        self._early_warning(AWS_REBALANCE_WARNING, f"EC2 rebalance recommendation (noticeTime {notice_time})", at)

    def _get(self, path: str) -> httpx.Response:
        response = self._client.get(path, headers={AWS_TOKEN_HEADER: self._session_token()})
        if response.status_code == 401:  # the token expired or IMDS forgot it: one more try with a fresh one
            self._token = None
            response = self._client.get(path, headers={AWS_TOKEN_HEADER: self._session_token()})
        return response

    def _session_token(self) -> str:
        now = self._clock()
        if self._token is not None and now < self._token_renew_at:
            return self._token
        response = self._client.put(AWS_TOKEN_PATH, headers={AWS_TOKEN_TTL_HEADER: str(self._token_ttl)})
        if response.status_code != 200:
            raise ProbeFailed(f"IMDSv2 token request answered {response.status_code}")
        token = response.text.strip()
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            raise ProbeFailed(f"IMDSv2 token request answered something that is no token: {token[:40]!r}")
        self._token = token
        self._token_renew_at = now + self._token_ttl * (1 - AWS_TOKEN_REFRESH_MARGIN)
        return self._token


@dataclass(frozen=True)
class Observed:
    value: str
    since: float  # when this value was first seen


class GceMetadataValue:
    """The latest value of one GCE metadata key, kept current by a daemon thread that long-polls it
    (`wait_for_change` with the last ETag), so a change is seen within moments of happening.

    `observed` is None while unknown: before the first answer, and after a failed or untrusted one (an answer
    without `Metadata-Flavor: Google` did not come from the metadata server); `last_error` then says why."""

    def __init__(
        self,
        base_url: str,
        path: str,
        *,
        wait_seconds: float,
        retry_seconds: float,
        timeout: float,
        clock: Callable[[], float],
    ) -> None:
        # The read timeout must outlast the server's own long-poll timeout.
        self._client = metadata_client(base_url, httpx.Timeout(timeout, read=wait_seconds + timeout + 5.0))
        self._path = path
        self._wait_seconds = wait_seconds
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"spotrun-gce{path}", daemon=True)
        self.observed: Observed | None = None  # replaced whole, so a reader never sees half an update
        self.last_error: str | None = None

    def start(self) -> GceMetadataValue:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop following; a long-poll in flight is abandoned to its daemon thread."""
        self._stop.set()

    def _follow(self) -> None:
        etag: str | None = None
        while not self._stop.is_set():
            try:
                value, etag = self._fetch(etag)
            except (ProbeFailed, httpx.HTTPError) as exc:
                self.observed, etag = None, None
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._stop.wait(self._retry_seconds)
                continue
            if self.observed is None or self.observed.value != value:
                self.observed = Observed(value, self._clock())
            self.last_error = None
            if etag is None:  # nothing to long-poll against: fall back to polling
                self._stop.wait(self._retry_seconds)

    def _fetch(self, etag: str | None) -> tuple[str, str | None]:
        """The value and its ETag; with an ETag known, wait for it to change (or the long-poll to time out)."""
        params: dict[str, str] = {}
        if etag is not None:
            params = {"wait_for_change": "true", "last_etag": etag, "timeout_sec": str(int(self._wait_seconds))}
        response = self._client.get(self._path, params=params, headers={GCE_FLAVOR_HEADER: GCE_FLAVOR})
        if response.headers.get(GCE_FLAVOR_HEADER) != GCE_FLAVOR:
            raise ProbeFailed(f"answer for {self._path} lacks {GCE_FLAVOR_HEADER}: {GCE_FLAVOR}; not trusted")
        if response.status_code != 200:
            raise ProbeFailed(f"{self._path} answered {response.status_code}")
        return response.text.strip(), response.headers.get("ETag")


class GcpPreemptionNotice(MetadataSource):
    """GCE spot/preemptible VMs: `instance/preempted` turning TRUE is a notice with a deadline 30 s after it was
    seen; `instance/maintenance-event` TERMINATE_ON_HOST_MAINTENANCE is a notice 60 s ahead, while
    MIGRATE_ON_HOST_MAINTENANCE (a live migration) is an early warning. Both keys are long-polled in
    background threads started by the first `poll`, which itself only reads what they saw."""

    name = "gcp-metadata"
    notice_seconds = GCE_PREEMPTION_NOTICE_SECONDS
    watches_after_notice = True

    def __init__(
        self,
        base_url: str = GCE_METADATA_URL,
        *,
        wait_seconds: float = GCE_LONG_POLL_SECONDS,
        retry_seconds: float = GCE_RETRY_SECONDS,
        timeout: float = PROBE_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.time,
        on_early_warning: EarlyWarningHandler | None = None,
    ) -> None:
        super().__init__(on_early_warning)
        settings: dict[str, Any] = {
            "wait_seconds": wait_seconds, "retry_seconds": retry_seconds, "timeout": timeout, "clock": clock
        }
        self._preempted = GceMetadataValue(base_url, GCE_PREEMPTED_PATH, **settings)
        self._maintenance = GceMetadataValue(base_url, GCE_MAINTENANCE_PATH, **settings)
        self._started = False

    def close(self) -> None:
        self._preempted.close()
        self._maintenance.close()

    def _probe(self) -> Notice | None:
        if not self._started:
            self._preempted.start()
            self._maintenance.start()
            self._started = True
        return self._either_notice()

    def _either_notice(self) -> Notice | None:
        """A notice from either key, the preemption's first; a key that cannot be read or parsed hides no good answer
        of the other, and is "unknown" only when the other has no notice."""
        unknown: ProbeFailed | None = None
        for read in (self._preemption, self._host_maintenance):
            try:
                notice = read()
            except ProbeFailed as failure:
                unknown = unknown or failure
                continue
            if notice is not None:
                return notice
        if unknown is not None:
            raise unknown
        return None

    def _preemption(self) -> Notice | None:
        preempted = self._known(self._preempted, "preempted")
        if preempted is None or preempted.value == "FALSE":
            return None
        if preempted.value != "TRUE":
            raise ProbeFailed(f"preempted is {preempted.value!r}, neither TRUE nor FALSE")
        return Notice(self.name, preempted.since + GCE_PREEMPTION_NOTICE_SECONDS, "GCE instance/preempted is TRUE")

    def _host_maintenance(self) -> Notice | None:
        event = self._known(self._maintenance, "maintenance-event")
        if event is None or event.value == "NONE":
            return None
        if event.value == "TERMINATE_ON_HOST_MAINTENANCE":
            deadline = event.since + GCE_MAINTENANCE_NOTICE_SECONDS
            return Notice(self.name, deadline, f"GCE maintenance-event {event.value}")
        if event.value != "MIGRATE_ON_HOST_MAINTENANCE":
            raise ProbeFailed(f"unexpected maintenance-event {event.value[:60]!r}")
        self._early_warning(f"maintenance {event.value}", f"GCE maintenance-event {event.value}", None)
        return None

    @staticmethod
    def _known(key: GceMetadataValue, label: str) -> Observed | None:
        """What the key's follower saw; None before its first answer; a failed last answer is ProbeFailed."""
        observed = key.observed
        if observed is None and key.last_error is not None:
            raise ProbeFailed(f"{label}: {key.last_error}")
        return observed


class AzurePreemptNotice(MetadataSource):
    """Azure Scheduled Events: an event of type Preempt for this VM (any VM when its name is not known) is a
    notice with its NotBefore as the deadline (None once the event has started and NotBefore is blank). Other
    events (Reboot, Redeploy, Freeze, Terminate) are early warnings. With `acknowledge`, the Preempt found is
    approved (StartRequests) once the agent is done with the VM (`instance_may_go`), which lets Azure evict it
    without waiting for NotBefore; approved as soon as it is seen, it would take the trainer's time to save."""

    name = "azure-scheduled-events"
    notice_seconds = AZURE_SPOT_NOTICE_SECONDS

    def __init__(
        self,
        base_url: str = AZURE_METADATA_URL,
        *,
        vm_name: str | None = None,
        acknowledge: bool = False,
        timeout: float = PROBE_TIMEOUT_SECONDS,
        on_early_warning: EarlyWarningHandler | None = None,
    ) -> None:
        super().__init__(on_early_warning)
        self._client = metadata_client(base_url, timeout)
        self._vm_name = vm_name.lower() if vm_name else None
        self._acknowledge = acknowledge
        self._preempt_event: dict[str, Any] | None = None  # the Preempt found, approved once the agent is done

    def close(self) -> None:
        self._client.close()

    def _probe(self) -> Notice | None:
        response = self._client.get(
            AZURE_EVENTS_PATH, params={"api-version": AZURE_API_VERSION}, headers={"Metadata": "true"}
        )
        if response.status_code != 200:
            raise ProbeFailed(f"scheduled events answered {response.status_code}")
        events = json_object(response, "scheduled events").get("Events")
        if not isinstance(events, list) or not all(isinstance(event, dict) for event in events):
            raise ProbeFailed(f"scheduled events document has no list of Events: {response.text[:80]!r}")
        mine = [event for event in events if self._concerns_this_vm(event)]
        for event in mine:
            if event.get("EventType") == AZURE_PREEMPT:
                return self._preempt_notice(event)
        for event in mine:
            self._early_warning(
                str(event.get("EventId")),
                f"Azure scheduled event {event.get('EventType')} not before {event.get('NotBefore') or 'now'}",
                None,
                str(event.get("EventType")),
            )
        return None

    def _concerns_this_vm(self, event: dict[str, Any]) -> bool:
        if self._vm_name is None:
            return True
        resources = event.get("Resources")
        return isinstance(resources, list) and self._vm_name in {str(name).lower() for name in resources}

    def _preempt_notice(self, event: dict[str, Any]) -> Notice:
        not_before = event.get("NotBefore")
        if not isinstance(not_before, str):
            raise ProbeFailed(f"Preempt event has no NotBefore: {event!r}")
        try:
            deadline = parsedate_to_datetime(not_before).timestamp() if not_before else None
        except (TypeError, ValueError) as exc:
            raise ProbeFailed(f"Preempt NotBefore {not_before!r} is not an RFC 1123 date") from exc
        self._preempt_event = event
        detail = f"Azure Preempt event {event.get('EventId')} not before {not_before or 'now'}"
        return Notice(self.name, deadline, detail)

    def instance_may_go(self) -> None:
        if self._acknowledge and self._preempt_event is not None:
            self._approve(self._preempt_event)
            self._preempt_event = None

    def _approve(self, event: dict[str, Any]) -> None:
        """Failing to approve loses nothing: the event starts at NotBefore anyway."""
        try:
            response = self._client.post(
                AZURE_EVENTS_PATH,
                params={"api-version": AZURE_API_VERSION},
                headers={"Metadata": "true"},
                json={"StartRequests": [{"EventId": event.get("EventId")}]},
            )
            if response.status_code != 200:
                log.warning("approving Azure event %s answered %d", event.get("EventId"), response.status_code)
        except httpx.HTTPError as exc:
            log.warning("approving Azure event %s failed: %s", event.get("EventId"), exc)


def cloud_notice_sources(environ: Mapping[str, str]) -> list[NoticeSource]:
    """The cloud sources this instance should watch, from the environment alone (no probing): a cloud's source
    is on when $SPOTRUN_CLOUD names it or its endpoint override ($SPOTRUN_AWS_METADATA_URL,
    $SPOTRUN_GCE_METADATA_URL, $SPOTRUN_AZURE_METADATA_URL) is set."""
    cloud = environ.get(CLOUD_ENV_VAR, "").strip().lower()
    if cloud and cloud not in KNOWN_CLOUDS:
        log.warning(
            "%s=%r names no cloud with a metadata notice source (known: %s); watching no cloud metadata",
            CLOUD_ENV_VAR, cloud, ", ".join(KNOWN_CLOUDS),
        )
    sources: list[NoticeSource] = []
    aws_url = _endpoint(environ, AWS_URL_ENV_VAR, AWS_METADATA_URL, cloud == "aws")
    if aws_url:
        sources.append(AwsSpotNotice(aws_url))
    gce_url = _endpoint(environ, GCE_URL_ENV_VAR, GCE_METADATA_URL, cloud == "gcp")
    if gce_url:
        sources.append(GcpPreemptionNotice(gce_url))
    azure_url = _endpoint(environ, AZURE_URL_ENV_VAR, AZURE_METADATA_URL, cloud == "azure")
    if azure_url:
        sources.append(
            AzurePreemptNotice(
                azure_url,
                vm_name=environ.get(AZURE_VM_NAME_ENV_VAR) or None,
                acknowledge=_flag(environ, AZURE_ACKNOWLEDGE_ENV_VAR),
            )
        )
    return sources


def _endpoint(environ: Mapping[str, str], variable: str, default: str, on_this_cloud: bool) -> str | None:
    override = environ.get(variable, "").strip()
    if override:
        if not override.startswith(("http://", "https://")):
            raise ValueError(f"${variable} must be an http:// or https:// URL, got {override!r}")
        return override.rstrip("/")
    return default if on_this_cloud else None


def _flag(environ: Mapping[str, str], variable: str) -> bool:
    text = environ.get(variable, "").strip().lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise ValueError(f"${variable} must be 1/true/yes or 0/false/no, got {text!r}")
