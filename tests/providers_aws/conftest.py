"""Fixtures for the AWS provider's tests: moto in-process and a real moto_server subprocess on loopback.

Test files cannot import this module (pytest runs with --import-mode=importlib), so helpers come as fixtures.
Fake credentials with distinctive values are set so tests can prove they never leak.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws
from moto.ec2.models import amis as moto_amis
from moto.utilities.utils import load_resource

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes
from fakes.boto_models import share_botocore_loader  # noqa: E402

from spotrun.providers.aws import AwsProvider  # noqa: E402
from spotrun.providers.base import LaunchRequest  # noqa: E402

REGION = "us-east-1"
FAKE_ACCESS_KEY = "AKIASPOTRUNLEAKTEST7"
FAKE_SECRET_KEY = "spotrun/leak+test/secret/4f1c9a"
# moto ships the public Amazon Linux parameters, so image resolution through SSM is exercised for real.
MOTO_IMAGE_PARAMETER = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"
AGENT_TOKEN = "agent-token-3b8e0d1f"


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    empty = tmp_path_factory.mktemp("aws-home")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("SPOTRUN_AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def image_ami(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], str]:
    """The AMI that MOTO_IMAGE_PARAMETER names, from moto's own data, and a file holding it for MOTO_AMIS_PATH.

    An EC2 backend loads every AMI moto knows (about 1,300 for us-east-1) when it is made, which a mock_aws() or a
    reset of moto_server does for each test: 0.3-0.8 s a test. The tests need only this one."""
    (parameter,) = [
        parameter
        for parameter in load_resource(f"ssm/resources/ami-amazon-linux-latest/{REGION}.json")
        if parameter["Name"] == MOTO_IMAGE_PARAMETER
    ]
    amis = load_resource(f"ec2/resources/latest_amis/{REGION}.json")
    images = [ami for ami in amis if ami["ami_id"] == parameter["Value"]]
    assert len(images) == 1, f"moto has no AMI {parameter['Value']} for {MOTO_IMAGE_PARAMETER}"
    path = tmp_path_factory.mktemp("moto-amis") / "amis.json"
    path.write_text(json.dumps(images))
    return images, str(path)


@pytest.fixture(autouse=True)
def only_the_image_ami(monkeypatch: pytest.MonkeyPatch, image_ami: tuple[list[dict[str, Any]], str]) -> None:
    """In-process moto loads only the image's AMI: what moto does when MOTO_AMIS_PATH is set before it is imported."""
    images, path = image_ami
    monkeypatch.setenv("MOTO_AMIS_PATH", path)
    monkeypatch.setattr(moto_amis, "AMIS", copy.deepcopy(images))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server(image_ami: tuple[list[dict[str, Any]], str]) -> Iterator[str]:
    """A moto_server subprocess on a free 127.0.0.1 port, with only the image's AMI; yields its endpoint URL."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MOTO_AMIS_PATH": image_ami[1]},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{url}/moto-api/", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {url}") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def moto_api() -> Iterator[httpx.Client]:
    """One client for moto_server's own API: httpx.post() makes a client, and an SSL context, each time (~50 ms)."""
    with httpx.Client() as client:
        yield client


@pytest.fixture(scope="session")
def boto_session() -> boto3.Session:
    """One session for all tests: it caches the service models, which keeps client creation cheap.
    Its credentials are resolved (from the fake environment) when the first client is made in a test."""
    return boto3.Session(region_name=REGION)


@pytest.fixture
def shared_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test of what AwsProvider does with no session given: the session it makes reads botocore's models
    through a loader shared in the process (tests/fakes/boto_models.py)."""
    share_botocore_loader(monkeypatch)


@pytest.fixture
def server_provider(
    moto_server: str, moto_api: httpx.Client, boto_session: boto3.Session
) -> Callable[..., AwsProvider]:
    """Providers against a freshly reset moto_server; keyword arguments are provider options."""
    moto_api.post(f"{moto_server}/moto-api/reset").raise_for_status()

    def make(**options: Any) -> AwsProvider:
        options.setdefault("image", MOTO_IMAGE_PARAMETER)
        return AwsProvider(session=boto_session, endpoint_url=moto_server, **options)

    return make


@pytest.fixture(params=["in-process", "moto_server"])
def aws(request: pytest.FixtureRequest, boto_session: boto3.Session) -> Iterator[AwsProvider]:
    """The provider against each moto flavour, with fresh state."""
    if request.param == "in-process":
        with mock_aws():
            yield AwsProvider(image=MOTO_IMAGE_PARAMETER, session=boto_session)
    else:
        yield request.getfixturevalue("server_provider")()


@pytest.fixture
def aws_in_process(boto_session: boto3.Session) -> Iterator[AwsProvider]:
    """For what only moto's in-process backend can set up (e.g. a spot reclaim)."""
    with mock_aws():
        yield AwsProvider(image=MOTO_IMAGE_PARAMETER, session=boto_session)


@pytest.fixture
def make_request() -> Callable[..., LaunchRequest]:
    """A launch request carrying user data shaped like the controller's (an agent config with a token)."""

    def make(token: str, *, zone: str = f"{REGION}a", market: str = "spot", **changes: Any) -> LaunchRequest:
        config = {"controller_url": "http://10.0.0.5:8765", "token": AGENT_TOKEN, "job_id": 42, "attempt_id": 7}
        fields: dict[str, Any] = {
            "zone": zone,
            "market": market,
            "instance_type": "p3.2xlarge",
            "client_token": token,
            "user_data": {
                "argv": ["/home/me/.venv/bin/python", "-m", "spotrun.agent"],
                "env": {"SPOTRUN_AGENT_CONFIG": json.dumps(config), "PATH": "/home/me/.venv/bin:/usr/bin"},
            },
            "max_price": 1.5 if market == "spot" else None,
        }
        fields.update(changes)
        return LaunchRequest(**fields)

    return make


@pytest.fixture
def inject() -> Callable[..., Callable[..., Any]]:
    """Answer one EC2 operation of a provider with a canned response through botocore's before-call hook.

    `inject(provider, "RunInstances", error=("Code", "message"))` makes the call fail as EC2 would;
    `inject(provider, "DescribeSpotPriceHistory", body={...})` makes it succeed with that body.
    Returns the handler (with a `.calls` list of the params sent) so a test can unregister it.
    """

    def install(
        provider: AwsProvider, operation: str, *, error: tuple[str, str] | None = None, body: dict[str, Any] | None = None
    ) -> Callable[..., Any]:
        calls: list[dict[str, Any]] = []

        def handler(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            calls.append(params)
            if error is not None:
                code, message = error
                return AWSResponse("https://ec2.test", 400, {}, None), {"Error": {"Code": code, "Message": message}}
            return AWSResponse("https://ec2.test", 200, {}, None), dict(body or {})

        handler.calls = calls  # type: ignore[attr-defined]
        provider.ec2.meta.events.register(f"before-call.ec2.{operation}", handler)
        return handler

    return install


@pytest.fixture
def ec2_client(boto_session: boto3.Session) -> Callable[[AwsProvider], Any]:
    """A plain boto3 EC2 client talking to the same moto as the provider (to check what landed there)."""

    def client(provider: AwsProvider) -> Any:
        return boto_session.client("ec2", endpoint_url=provider.ec2.meta.endpoint_url)

    return client
