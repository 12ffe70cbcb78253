"""Who may run jobs on the local cloud through the team server. The local cloud runs a job's command as a process on
the server's own machine, as the server's OS user, with the store, the users' token hashes and the server's cloud
credentials in reach: right for one user's embedded mode, and on a shared server only where its operator allows it
(SPOTRUN_SERVER_LOCAL_CLOUD)."""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from spotrun.control.states import LIVE, state_names
from spotrun.providers import CLOUDS
from spotrun.server.users import Principal
from spotrun.spec import JobSpec, Problem
from spotrun.spec.models import LOCAL_CLOUD
from spotrun.state import Job
from spotrun.state.models import User

LOCAL_CLOUD_VAR = "SPOTRUN_SERVER_LOCAL_CLOUD"
# The refusal's heading (the API's `detail`): the file may be valid, the server's operator does not allow it
REFUSED_BY_SETTING = "job refused by this server's settings"


class LocalCloudAccess(StrEnum):
    OFF = "off"  # the default: nobody, admins included
    ADMINS = "admins"
    ALL = "all"

    def allows(self, user: Principal) -> bool:
        return self is LocalCloudAccess.ALL or (self is LocalCloudAccess.ADMINS and user.is_admin)


def local_cloud_problem(spec: JobSpec, user: Principal, access: LocalCloudAccess) -> Problem | None:
    """Why `user` may not run `spec` on this server (None: they may). Checked before any other check of a local job,
    which would look at the server's folders for it (`workdir`)."""
    if spec.resources.cloud != LOCAL_CLOUD or access.allows(user):
        return None
    who = "its admins only" if access is LocalCloudAccess.ADMINS else "nobody"
    clouds = ", ".join(cloud for cloud in CLOUDS if cloud != LOCAL_CLOUD)
    what = (f"cloud {LOCAL_CLOUD!r} runs the job's command on the team server's own machine, which this server allows "
            f"{who} (its operator's setting {LOCAL_CLOUD_VAR}={access.value})")
    if "cloud" not in spec.resources.model_fields_set:
        return Problem("resources.cloud", f"not given, so {LOCAL_CLOUD!r}: {what}; name the cloud to run on ({clouds})")
    return Problem("resources.cloud", f"{what}; run it on another cloud ({clouds})")


def live_local_jobs_refused_now(session: Session, access: LocalCloudAccess) -> list[int]:
    """The live local-cloud jobs, launched through the API, whose owner `access` would now refuse: accepted under an
    earlier setting (or before there was one), they still run; the server names them at its start."""
    rows = session.execute(
        select(Job.id, Job.owner, Job.spec, User.is_admin).join(User, User.name == Job.owner)  # not embedded ones
        .where(Job.state.in_(state_names(LIVE))).order_by(Job.id)
    )
    return [
        job_id for job_id, owner, spec, is_admin in rows
        if (spec.get("resources") or {}).get("cloud") == LOCAL_CLOUD and not access.allows(Principal(owner, is_admin))
    ]
