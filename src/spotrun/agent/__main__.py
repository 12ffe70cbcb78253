"""`python -m spotrun.agent [--config FILE]`: run one attempt on this instance, then exit 0."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from spotrun.agent.config import CONFIG_ENV_VAR, AgentConfigError, load_config
from spotrun.agent.notices import SigtermNotice, metadata_notice_sources
from spotrun.agent.gang import GangAgent
from spotrun.agent.job_part import JobPartUnavailable, complete_config, forget_copy
from spotrun.agent.supervisor import Agent


def configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s spotrun-agent %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("httpx", "httpcore", "fsspec", "s3fs", "botocore", "aiobotocore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spotrun.agent", description=__doc__)
    parser.add_argument("--config", metavar="FILE", help=f"JSON config file (default: ${CONFIG_ENV_VAR})")
    args = parser.parse_args(argv)
    configure_logging()
    try:
        boot, problem = load_config(args.config), None
    except AgentConfigError as exc:
        logging.getLogger("spotrun.agent").error("%s", exc)
        if exc.usable is None:
            return 2
        boot, problem = exc.usable, str(exc)  # the attempt fails, saying why in the job's log
    try:
        # Before SIGTERM is taken over: until the job's part is here there is no trainer to give time to save.
        config = boot if problem else complete_config(boot)
    except JobPartUnavailable as refused:  # the attempt fails, saying why in the job's log
        config, problem = boot, str(refused)
    sigterm = SigtermNotice(config.notice_grace).install()
    agent_class = GangAgent if config.gang is not None else Agent
    try:
        sources = metadata_notice_sources()
    except Exception as exc:  # a malformed cloud setting: the attempt fails, saying so where its owner looks
        sources, problem = [], problem or f"cannot watch for preemption notices: {exc}"
    agent = agent_class(config, [sigterm, *sources], startup_problem=problem)
    agent.run()
    forget_copy(config)
    if agent.backup_left_running or agent.restore_left_running:
        exit_now()
    return 0


def exit_now() -> None:
    """Exit without waiting for the threads still copying to or from a store that stopped answering: the interpreter's
    exit joins every copy thread (`concurrent.futures`), and would wait on them for as long as the store hangs."""
    logging.getLogger("spotrun.agent").warning("exiting with a copy (the final backup's, or the restore's) still "
                                               "stuck in a store call")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
