"""a launch EC2 refuses for a reason no retry mends (the configured AMI does not exist) is retried for as
long as the job lives; the job never fails and says why only in its events."""

from __future__ import annotations

from botocore.exceptions import ClientError

from spotrun.control.states import TERMINAL, JobState
from spotrun.providers.aws.errors import translate

NO_MAX_WAIT = """
name: unit
run: "true"
resources: {cloud: local, instance_type: local.cpu}
spot: {zones: [m-a, m-b, m-c], preemptions_before_fallback: 3}
max_restarts_on_error: 1
"""


def test_a_launch_refused_for_a_missing_image_is_not_retried_forever(world, monkeypatch):
    calls = []

    def missing_image(request):
        calls.append(request.client_token)
        error = ClientError({"Error": {"Code": "InvalidAMIID.NotFound",
                                       "Message": "The image id '[ami-0abc1234]' does not exist"}}, "RunInstances")
        raise translate(error, "ec2:RunInstances")  # what the AWS provider raises for EC2's answer

    monkeypatch.setattr(world.cloud, "launch", missing_image)
    job_id = world.submit(NO_MAX_WAIT)
    for _ in range(24 * 60):  # a day, a tick a minute; a job that ended stays as it is
        world.tick(60)
        if JobState(world.job(job_id).state) in TERMINAL:
            break
    job = world.job(job_id)
    assert job.state == "FAILED"
