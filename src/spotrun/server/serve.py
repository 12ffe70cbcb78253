"""`spotrun server`: the team server process. One port serves the user API, the agent API, /metrics and /healthz;
the controller runs in the same process, driven by the daemon's lease and tick loop."""

from __future__ import annotations

import logging
import socket
import threading

import uvicorn

from spotrun.server.access_log import logging_config
from spotrun.server.app import create_app
from spotrun.server.daemon import AgentUrl, Daemon, checked_setting, from_env, settings_from_env
from spotrun.server.local_cloud import LOCAL_CLOUD_VAR, LocalCloudAccess, live_local_jobs_refused_now
from spotrun.server.log_pruner import LogPruner
from spotrun.server.metrics_access import MetricsToken
from spotrun.state import Store

METRICS_TOKEN_VAR = "SPOTRUN_METRICS_TOKEN"
PUBLIC_URL_VAR = "SPOTRUN_PUBLIC_URL"

log = logging.getLogger("spotrun.server")


def metrics_token_from_env() -> str | None:
    """The bearer token /metrics requires: $SPOTRUN_METRICS_TOKEN (InvalidSetting, not showing it, when it cannot be
    one); None when unset: /metrics is open."""
    return from_env(METRICS_TOKEN_VAR, MetricsToken, secret=True)


def local_cloud_from_env() -> LocalCloudAccess:
    """Whose jobs may run on the local cloud: $SPOTRUN_SERVER_LOCAL_CLOUD (InvalidSetting when it is none of off,
    admins, all); unset: nobody's."""
    return from_env(LOCAL_CLOUD_VAR, LocalCloudAccess) or LocalCloudAccess.OFF


def warn_of_local_jobs_refused_now(store: Store, access: LocalCloudAccess) -> None:
    """Jobs the API accepted under an earlier setting still run (they were accepted; the server changes no stored
    job): name them, so that the operator can cancel those not wanted."""
    with store.session() as session:
        refused = live_local_jobs_refused_now(session, access)
    if refused:
        log.warning("live jobs on the local cloud that %s=%s would refuse now still run, as they were accepted: %s "
                    "(`spotrun cancel ID` stops one)", LOCAL_CLOUD_VAR, access.value, ", ".join(map(str, refused)))


def check_public_url(url: str, given_as: str = PUBLIC_URL_VAR) -> None:
    """InvalidSetting, naming `given_as` and the value, for a URL agents cannot report to (checked as
    SPOTRUN_CONTROLLER_URL is): an agent told it refused its configuration, and its job stayed PROVISIONING, billed."""
    checked_setting(given_as, url, AgentUrl)


def public_url(host: str, port: int) -> str:
    """The address agents and clients are told to use when none is configured."""
    reachable = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://[{reachable}]:{port}" if ":" in reachable else f"http://{reachable}:{port}"


def serve(
    store: Store, *, host: str, port: int, url: str | None = None, tick_interval: float = 0.5,
    run_controller: bool = True, keep_logs: float | None = None, url_given_as: str = PUBLIC_URL_VAR,
) -> None:
    """Serve until SIGINT/SIGTERM; `port` 0 picks a free one (the listening line names it). With `keep_logs`
    (seconds), the logs of jobs that ended longer ago are removed, at start and every hour (`LogPruner`). A controller
    setting the environment gives that the controller cannot use is refused first (`daemon.InvalidSetting`), as is
    a metrics token that cannot be one (`metrics_token_from_env`), a local cloud setting (`local_cloud_from_env`) or
    a `url` agents cannot report to (`check_public_url`, naming `url_given_as`)."""
    if url:
        check_public_url(url, url_given_as)
    metrics_token = metrics_token_from_env()
    local_cloud = local_cloud_from_env()
    if run_controller:
        settings_from_env(url="")
    sock = _listen(host, port)
    url = url or public_url(host, sock.getsockname()[1])
    warn_of_local_jobs_refused_now(store, local_cloud)
    daemon = Daemon(store, tick_interval=tick_interval, idle_exit=0)
    app = create_app(store, metrics_token=metrics_token, local_cloud=local_cloud, heard=daemon.heard)
    server = uvicorn.Server(uvicorn.Config(app, log_config=logging_config(), log_level="info",
                                           timeout_graceful_shutdown=3))
    controller = threading.Thread(target=daemon.run_at, args=(url,), name="controller", daemon=True)
    if run_controller:
        controller.start()
    pruner = LogPruner(store, keep_logs) if keep_logs is not None else None
    if pruner is not None:
        threading.Thread(target=pruner.run, name="log-pruner", daemon=True).start()
    print(f"spotrun server listening on {url}", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        daemon.stop()
        if pruner is not None:
            pruner.stop()
        if controller.is_alive():
            controller.join(timeout=10)


class CannotListen(RuntimeError):
    """The address is taken, not this machine's, or not an address."""


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock
